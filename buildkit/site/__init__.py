"""Site profiles: what a cluster offers and demands, loaded from validated YAML."""

from .load import list_sites, load_site
from .model import Fact, Partition, Platform, Policy, Runtime, Site

__all__ = ["Fact", "Partition", "Platform", "Policy", "Runtime", "Site", "list_sites", "load_site"]
