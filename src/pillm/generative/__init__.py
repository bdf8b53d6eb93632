"""pillm.generative."""
