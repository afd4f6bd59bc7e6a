"""A cluster as it is: its profile detected from what Slurm and the nodes say (``ckit sites detect``), the checks
that prove ckit's jobs run there (``ckit doctor``) and the checks run before a job is queued (preflight)."""
