"""Pure renderers: one resolved recipe → a Dockerfile or a Singularity/Apptainer definition file."""
