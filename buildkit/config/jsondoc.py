"""The one way ckit parses JSON it did not write: size-capped by the caller, depth-checked, type-checked.

Python's parser recurses once per level and raises RecursionError (not ValueError) on a deep document; code
that walks the result (schema checks, ``json.dumps``) recurses too. So a document is refused, with a clear
message, when it nests deeper than the ``nesting`` limit, before anything else looks at it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import CkitError, ConfigError
from . import limits


def too_deep(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests lists/dicts more than ``max_depth`` levels (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def parse(data: bytes | str, what: str, *, error: type[CkitError] = ConfigError, expect: type | None = dict) -> Any:
    """``data`` as JSON; ``error`` (naming ``what``) for invalid or too deep JSON, or a value not of ``expect``."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise error(f"{what} is not valid JSON: {str(err)[:120]}") from err
    except RecursionError as err:
        raise error(f"{what} nests too deeply to be read", hint="the content is malformed or hostile") from err
    depth = limits.size("nesting")
    if too_deep(value, depth):
        raise error(f"{what} nests deeper than {depth} levels", hint="the content is malformed or hostile")
    if expect is not None and not isinstance(value, expect):
        kinds: dict[type, str] = {dict: "a JSON object", list: "a JSON list"}
        kind = kinds.get(expect) or expect.__name__
        raise error(f"{what} must be {kind}, not {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def typed(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str, *,
          error: type[CkitError] = ConfigError, default: Any = None) -> Any:
    """``obj[key]`` checked to be of ``kind`` (null or absent gives ``default``)."""
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _tuple(kind)):
        names = " or ".join(_json_type(k()) if k is not type(None) else "null" for k in _tuple(kind))
        raise error(f"{what}: {key} must be {names}, not {_json_type(value)}")
    return value


def strings(obj: Mapping[str, Any], key: str, what: str, *, error: type[CkitError] = ConfigError) -> list[str]:
    """``obj[key]`` as a list of strings (null or absent: empty)."""
    value = typed(obj, key, list, what, error=error, default=[])
    if not all(isinstance(item, str) for item in value):
        raise error(f"{what}: {key} must be a list of strings")
    return list(value)


def _tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
