"""The reference pages of the docs site, generated from the code at every build (never written by hand, never
stale): every command and option from the Typer app, every recipe and site key from the JSON schemas."""

from __future__ import annotations

import re
from typing import Any

import typer

_CODE = re.compile(r"(`[^`]*`)")
# outside code spans: markdown's own escapes, and HTML's for the angle brackets (markdown has no escape for them)
_TEXT_ESCAPES = {"\\": "\\\\", "&": "&amp;", "|": "\\|", "[": "\\[", "]": "\\]", "*": "\\*", "_": "\\_", "<": "&lt;",
                 ">": "&gt;"}


def _escape(text: str) -> str:
    """Help text as one table cell that shows exactly the text: pipes, brackets, stars and angle brackets are text,
    not markdown or HTML; a code span is left as it is (a table's pipe inside one is text already)."""
    parts = _CODE.split(" ".join(text.split()))
    return "".join(part if part.startswith("`") else "".join(_TEXT_ESCAPES.get(c, c) for c in part)
                   for part in parts)


def _option_rows(command: Any) -> list[str]:
    rows = ["| option | meaning | default |", "|---|---|---|"]
    for param in command.params:
        if param.name in ("help",) or getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            names = f"`{param.human_readable_name}`"
            helptext = getattr(param, "help", "") or ""
        else:
            names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
            if param.metavar and not param.is_flag:
                names += f" `{param.metavar}`"  # a pipe in a code span does not split the table's cell
            helptext = param.help or ""
        default = getattr(param, "default", None)
        shown = "" if default in (None, False, (), []) or callable(default) else f"`{default}`"
        rows.append(f"| {names} | {_escape(helptext)} | {shown} |")
    return rows if len(rows) > 2 else []


def _commands(group: Any, prefix: str) -> list[tuple[str, Any]]:
    """(``ckit sub command``, command) for every command under ``group`` (typer's own click, duck-typed)."""
    found = []
    ctx = group.context_class(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        path = f"{prefix} {name}"
        found.append((path, command))
        if hasattr(command, "list_commands"):
            found += _commands(command, path)
    return found


def cli_markdown() -> str:
    """Every command, its help and its options, in the order ``ckit --help`` lists them."""
    from buildkit.cli import _app

    root = typer.main.get_command(_app())
    lines = ["# Command reference", "", "Generated from the CLI itself at every build of this site: what `ckit COMMAND "
             "--help` prints, every command and every option.", "", "## Global options", "",
             *_option_rows(root), ""]
    for path, command in _commands(root, "ckit"):
        lines += [f"## `{path}`", "", _escape(command.help or command.short_help or ""), ""]
        rows = _option_rows(command)
        lines += [*rows, ""] if rows else []
    return "\n".join(lines) + "\n"


def _schema_rows(schema: dict[str, Any], prefix: str = "") -> list[str]:
    rows = []
    required = set(schema.get("required", ()))
    for key, spec in schema.get("properties", {}).items():
        mark = " **(required)**" if key in required else ""
        kind = spec.get("type", "enum" if "enum" in spec else "")
        choices = f" One of: {', '.join(f'`{c}`' for c in spec['enum'])}." if "enum" in spec else ""
        rows.append(f"| `{prefix}{key}`{mark} | {kind if isinstance(kind, str) else ' or '.join(kind)} | "
                    f"{_escape(spec.get('description', ''))}{choices} |")
        if spec.get("type") == "object" and "properties" in spec:
            rows += _schema_rows(spec, f"{prefix}{key}.")
        nested = spec.get("additionalProperties")
        if isinstance(nested, dict) and "properties" in nested:
            rows += _schema_rows(nested, f"{prefix}{key}.NAME.")
        items = spec.get("items")
        if isinstance(items, dict) and "properties" in items:
            rows += _schema_rows(items, f"{prefix}{key}[].")
    return rows


def sites_markdown() -> str:
    from buildkit.site.schema import SITE_SCHEMA

    return "\n".join(["# Site profile reference", "",
                      "Generated from the schema every profile is checked against (`buildkit/site/schema.py`). "
                      "Every key of `sites/NAME.yaml`; nested keys are written with dots.", "",
                      "| key | type | meaning |", "|---|---|---|", *_schema_rows(SITE_SCHEMA)]) + "\n"


def recipes_markdown() -> str:
    from buildkit.recipe.schema import reference_markdown

    return "\n".join(["# Recipe file reference", "",
                      "Generated from the schemas every recipe file is checked against (`buildkit/recipe/schema.py`).",
                      "", reference_markdown()])


PAGES = {"reference/cli.md": cli_markdown, "reference/recipes.md": recipes_markdown,
         "reference/sites.md": sites_markdown}
