"""pillm.core."""
