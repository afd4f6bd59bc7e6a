"""The CLI: :mod:`.app` (the Typer app, its global options, output helpers, the settings), :mod:`.flags` (global
flags anywhere on the line), :mod:`.progress_bars` (rich progress), then one module per command group, each
registering its commands on :data:`.app.app`. The entry point is :mod:`buildkit.cli`."""
