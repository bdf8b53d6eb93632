"""pillm.lm."""
