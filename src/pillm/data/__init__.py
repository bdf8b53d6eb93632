"""pillm.data."""
