"""Layered YAML recipes: bases, add-ons and stacks, resolved into one frozen description."""
