"""Parameter values: type checks, choices, patterns, and ``--set LAYER.PARAM=VALUE`` parsing."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from ..outside import ascii_int
from .model import ParamSpec, ParamValue

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_SET = re.compile(r"^(?P<layer>[a-z][a-z0-9-]*)\.(?P<param>[a-z][a-z0-9_]*)=(?P<value>.*)$", re.DOTALL)


def check_value(spec: ParamSpec, value: Any, *, where: Callable[[str], ConfigError]) -> ParamValue:
    """Normalise ``value`` (from YAML) for ``spec`` or raise the error ``where(message)`` builds."""
    if spec.type == "bool":
        if not isinstance(value, bool):
            raise where(f"parameter '{spec.name}' expects true or false, got {value!r}")
        return value
    if spec.type == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise where(f"parameter '{spec.name}' expects a whole number, got {value!r}")
        return value
    if spec.type == "list":
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str | int | float) for v in value):
            raise where(f"parameter '{spec.name}' expects a list of strings, got {value!r}")
        items = tuple(str(v) for v in value)
        for item in items:
            _check_string(spec, item, where)
        if len(set(items)) != len(items):
            raise where(f"parameter '{spec.name}' lists an item twice: {list(items)}")
        return items
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise where(f"parameter '{spec.name}' expects a string, got {value!r}")
    text = str(value)
    _check_string(spec, text, where)
    return text


def _check_string(spec: ParamSpec, text: str, where: Callable[[str], ConfigError]) -> None:
    if spec.choices and text not in spec.choices:
        import difflib

        close = difflib.get_close_matches(text, spec.choices, n=1)
        tail = f"; did you mean '{close[0]}'?" if close else ""
        raise where(f"parameter '{spec.name}' must be one of {', '.join(spec.choices)}, got {text!r}{tail}")
    if spec.pattern and not re.fullmatch(spec.pattern, text):
        raise where(f"parameter '{spec.name}' value {text!r} does not match {spec.pattern}")
    if "\n" in text or "\x00" in text:
        raise where(f"parameter '{spec.name}' value must be one line")


def parse_cli(spec: ParamSpec, text: str, *, where: Callable[[str], ConfigError]) -> ParamValue:
    """A value given on the command line as text."""
    if spec.type == "bool":
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise where(f"parameter '{spec.name}' expects true or false, got {text!r}")
    if spec.type == "int":
        number = ascii_int(text.strip(), signed=True)  # int() would take '٣' and '1_0'
        if number is None:
            raise where(f"parameter '{spec.name}' expects a whole number in ASCII digits, got {text!r}")
        return number
    return check_value(spec, text, where=where)


def split_set(text: str) -> tuple[str, str, str]:
    """``LAYER.PARAM=VALUE`` → (layer, param, value)."""
    match = _SET.match(text)
    if not match:
        raise ConfigError(f"--set {text!r}: expected LAYER.PARAM=VALUE",
                          hint="for example --set horovod.version=0.28.1")
    return match["layer"], match["param"], match["value"]


def format_value(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)
