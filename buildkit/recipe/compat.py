"""Compatibility rules, evaluated against the base's facts and each layer's parameters."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from .model import Condition, Constraint, ParamValue
from .params import format_value

_VERSION = re.compile(r"^v?([0-9]+(?:\.[0-9]+)*)")


def version_key(text: str) -> tuple[int, ...] | None:
    """Leading dotted number of a version string (``1.13.0a0+936e930`` → (1, 13, 0)); None if there is none."""
    match = _VERSION.match(text.strip())
    return tuple(int(p) for p in match[1].split(".")) if match else None


def _compare(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    width = max(len(a), len(b))
    pa, pb = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (pa > pb) - (pa < pb)


def _holds(cond: Condition, value: ParamValue | None, *, in_then: bool) -> bool:
    """Whether ``cond`` holds. An unknown value or a value that is not a version never makes a rule apply
    (in ``when``) and never breaks one (in ``then``)."""
    if value is None:
        return in_then
    if cond.op == "contains":
        return cond.value in value if isinstance(value, tuple) else cond.value == format_value(value)
    text = format_value(value)
    if cond.op == "equals":
        return text == cond.value
    if cond.op == "matches":
        return re.search(cond.value, text) is not None
    have, want = version_key(text), version_key(cond.value)
    if have is None or want is None:
        return in_then
    order = _compare(have, want)
    return {"at_least": order >= 0, "at_most": order <= 0, "below": order < 0}[cond.op]


def violations(
    constraints: tuple[Constraint, ...],
    *,
    facts: Mapping[str, str],
    params: Mapping[str, ParamValue],
) -> list[tuple[Constraint, str]]:
    """Constraints that apply and fail, each with its expanded message."""

    def value(cond: Condition) -> ParamValue | None:
        kind, name = cond.subject.split(":", 1)
        return facts.get(name) if kind == "fact" else params.get(name)

    failed = []
    for rule in constraints:
        if all(_holds(c, value(c), in_then=False) for c in rule.when) and not all(
            _holds(c, value(c), in_then=True) for c in rule.then
        ):
            names = {**{k: format_value(v) for k, v in params.items()}, **facts}
            message = re.sub(r"\{([a-z_][a-z0-9_]*)\}", functools.partial(_name_or_field, names), rule.message)
            failed.append((rule, message))
    return failed


def _name_or_field(names: dict[str, str], match: re.Match[str]) -> str:
    """``{name}`` in a rule's message: the parameter's or fact's value, or the text as written."""
    return names.get(match[1], match[0])
