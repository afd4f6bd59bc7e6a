"""Loading validated YAML configuration (recipes and sites) from layered folders."""
