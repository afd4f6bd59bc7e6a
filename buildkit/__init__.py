"""ckit: deep-learning containers from a recipe to a running multi-node job on HPC clusters."""

__version__ = "0.1.0"
