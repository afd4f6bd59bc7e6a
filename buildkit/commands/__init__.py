"""One module per command group; each registers its commands on :data:`buildkit.cliapp.app`."""
