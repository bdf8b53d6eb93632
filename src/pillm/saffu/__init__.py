"""pillm.saffu."""
