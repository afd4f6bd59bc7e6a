"""Build engines, registered by name (see base.py)."""
