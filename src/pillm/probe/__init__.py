"""pillm.probe."""
