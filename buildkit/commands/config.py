"""``ckit config show``: each of the user's defaults, and where it came from (flag, env NAME, FILE:LINE, default)."""

from __future__ import annotations

import typer

from ..api._cli import KEYS
from ..outside import shown
from .app import SETTINGS, JsonOpt, app, emit_json, say

config_app = typer.Typer(name="config", help="The user's defaults: config.toml and the environment (README, "
                                             "Configuration).", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(config_app)


def _shown_value(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return ", ".join(shown(str(p)) for p in value)
    if isinstance(value, int):
        return f"{value} bytes ({value / (1 << 30):.3g} GiB)"
    return shown(str(value))


@config_app.command("show")
def show(as_json: JsonOpt = False) -> None:
    """Each setting, its value and its source: a flag, env NAME, the config file's line, or the default."""
    config = SETTINGS.config
    assert config is not None  # loaded by the app's callback before any command
    if as_json:
        emit_json(config.as_json())
        return
    say(f"config file: {shown(str(config.path))}" + ("" if config.exists else " (none)"))
    for key in KEYS:
        setting = config.get(key.name)
        source = setting.source if setting.source != "default" else f"default: {key.default}"
        say(f"  {key.name:<15} {_shown_value(setting.value):<30} {source}  (env {key.env})")
