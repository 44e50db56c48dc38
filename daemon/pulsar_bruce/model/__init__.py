"""Shared data types of the daemon's parts (a leaf: imports none of the other parts)."""
