"""OCI registry layer: references, credentials, the distribution API client and ORAS artifacts."""
