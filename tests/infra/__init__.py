"""Real components (podman API service, registries, Slurm, base images) started for tests, CI and the demo."""
