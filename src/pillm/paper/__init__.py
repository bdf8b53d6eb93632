"""pillm.paper."""
