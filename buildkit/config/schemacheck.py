"""A quick yes to "does this document satisfy this JSON schema?" for the keywords ckit's own schemas use.

``jsonschema`` costs about 0.1 s of CPU to import and builds a validator per call; every ``ckit build`` reads
a handful of recipe files that are almost always valid. :func:`conforms` answers True only when it is sure
(every keyword it meets is one it knows, and each holds); anything else (an unknown keyword, a violation)
answers False, and :func:`buildkit.config.yamlfile.validate` then asks ``jsonschema``, which decides and words
the error. So a wrong answer here can only cost time, never let an invalid document through — as long as each
keyword below is checked at least as strictly as JSON Schema (draft 2020-12) does; tests compare the two.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    # JSON Schema's integer includes 1.0; stricter here (only int) is on the safe side
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
}
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})
_OBJECT_KEYS = frozenset({"properties", "additionalProperties", "required", "propertyNames", "minProperties"})


def conforms(instance: Any, schema: Any) -> bool:
    """True when ``instance`` surely satisfies ``schema``; False when it does not or this check cannot tell."""
    if schema is True:
        return True
    if not isinstance(schema, dict):
        return False
    for key, value in schema.items():
        if key in _ANNOTATIONS or key in _OBJECT_KEYS and not isinstance(instance, dict):
            continue
        check = _KEYWORDS.get(key)
        if check is None or not check(instance, value, schema):
            return False
    return True


def _type(instance: Any, value: Any, _schema: dict[str, Any]) -> bool:
    names = value if isinstance(value, list) else [value]
    return any(name in _TYPES and _TYPES[name](instance) for name in names)


def _same(a: Any, b: Any) -> bool:
    """Surely equal in JSON: scalars of one Python type (``True`` is not ``1``; ``1`` and ``1.0``, or lists and
    objects, are left to jsonschema)."""
    return type(a) is type(b) and isinstance(a, (str, int, float, bool)) and a == b


def _fails(instance: Any, schema: Any) -> bool:
    """True when ``instance`` surely violates ``schema`` (its ``type`` or ``required``, checked exactly)."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind is not None:
        names = kind if isinstance(kind, list) else [kind]
        whole = isinstance(instance, float) and instance.is_integer()  # JSON Schema's integer takes 1.0
        if not any(name in _TYPES and _TYPES[name](instance) or name == "integer" and whole for name in names):
            return True
    required = schema.get("required")
    return isinstance(instance, dict) and isinstance(required, list) and any(k not in instance for k in required)


def _one_of(instance: Any, value: list[Any], _schema: dict[str, Any]) -> bool:
    """Exactly one: one alternative surely holds and every other surely fails."""
    holds = [conforms(instance, sub) for sub in value]
    return holds.count(True) == 1 and all(ok or _fails(instance, sub) for ok, sub in zip(holds, value, strict=True))


def _properties(instance: dict[str, Any], value: dict[str, Any], _schema: dict[str, Any]) -> bool:
    return all(conforms(instance[k], sub) for k, sub in value.items() if k in instance)


def _additional(instance: dict[str, Any], value: Any, schema: dict[str, Any]) -> bool:
    if "patternProperties" in schema:
        return False  # not handled: let jsonschema decide
    known = schema.get("properties") or {}
    return all(conforms(v, value) for k, v in instance.items() if k not in known)


def _items(instance: Any, value: Any, _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, list) or all(conforms(item, value) for item in instance)


def _pattern(instance: Any, value: str, _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, str) or matches(value, instance)


@functools.cache
def _ecma(pattern: str) -> re.Pattern[str]:
    # A JSON Schema pattern is an ECMA 262 regular expression, whose final $ is the end of the text; Python's
    # also matches before a last newline, so ^[a-z][a-z0-9_-]*$ took the site name "evil\n" (which then ended
    # the comment line of a job script early).
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def matches(pattern: str, text: str) -> bool:
    """Whether ``text`` matches the JSON Schema ``pattern`` (searched, as the standard says; ``$`` at its end
    is the end of the text)."""
    return _ecma(pattern).search(text) is not None


def _minimum(instance: Any, value: Any, _schema: dict[str, Any]) -> bool:
    return not _TYPES["number"](instance) or instance >= value


def _min_items(instance: Any, value: int, _schema: dict[str, Any]) -> bool:
    return not isinstance(instance, list) or len(instance) >= value


_KEYWORDS: dict[str, Callable[[Any, Any, dict[str, Any]], bool]] = {
    "type": _type,
    "enum": lambda instance, value, _s: any(_same(instance, choice) for choice in value),
    "const": lambda instance, value, _s: _same(instance, value),
    "properties": _properties,
    "additionalProperties": _additional,
    "required": lambda instance, value, _s: all(k in instance for k in value),
    "propertyNames": lambda instance, value, _s: all(conforms(k, value) for k in instance),
    "minProperties": lambda instance, value, _s: len(instance) >= value,
    "items": _items,
    "minItems": _min_items,
    "pattern": _pattern,
    "minimum": _minimum,
    "oneOf": _one_of,
}
