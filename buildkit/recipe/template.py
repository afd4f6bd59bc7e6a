"""``{name}`` placeholders in recipe strings.

A placeholder is ``{name}`` or ``{base.name}`` not preceded by ``$`` (so shell ``${VAR}`` stays as it is).
In shell commands every substituted value is shell-quoted; a list expands to its quoted items separated by spaces.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping

from ..errors import ConfigError
from .model import ParamValue
from .params import format_value

_PLACEHOLDER = re.compile(r"(?<!\$)\{([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)?)\}")


def expand(
    text: str,
    values: Mapping[str, ParamValue],
    *,
    shell: bool,
    where: Callable[[str], ConfigError],
) -> str:
    def sub(match: re.Match[str]) -> str:
        name = match[1]
        if name not in values:
            import difflib

            close = difflib.get_close_matches(name, list(values), n=1)
            hint = f"; did you mean '{{{close[0]}}}'?" if close else ""
            raise where(f"unknown placeholder '{{{name}}}'{hint}")
        value = values[name]
        if not shell:
            return format_value(value)
        if isinstance(value, tuple):
            return " ".join(shlex.quote(v) for v in value)
        return shlex.quote(format_value(value))

    return _PLACEHOLDER.sub(sub, text)


def placeholders(text: str) -> list[str]:
    return _PLACEHOLDER.findall(text)
