"""pillm.lora."""
