"""The environment a recipe adds to its base image at run time: one meaning in the Dockerfile and in the .def.

Env steps apply in order, as Docker applies ``ENV``: in a value, ``$NAME`` or ``${NAME}`` stands for the value
the variable had before the step (every value of one step reads the variables as they were before it). A
variable the recipe set earlier is replaced by the value the recipe gave it; one it has not set stays a
reference, to the base image's value at run time. So variables compose: ``PATH=/opt/venv/bin:$PATH`` after
``PATH=/opt/ckit-demo:$PATH`` is ``/opt/venv/bin:/opt/ckit-demo:$PATH``, both folders before the base's PATH
(``PATH=$PATH:/opt/tools/bin`` appends), never the last assignment alone.

The Dockerfile writes the steps as they are (Docker expands them while it builds); the .def writes these
composed values in ``%environment``, which apptainer sources after the base image's environment: the same
variables with the same values either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import ConfigError
from .model import Env, Step

REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def references(value: str) -> list[str]:
    """The variables ``value`` refers to, in order."""
    return [m[1] or m[2] for m in REFERENCE.finditer(value)]


def expand(value: str, known: dict[str, str]) -> str:
    """``value`` with its references to ``known`` variables replaced by their values (the others kept)."""
    return REFERENCE.sub(lambda m: known.get(m[1] or m[2], m[0]), value)


def compose(steps: Iterable[Step]) -> tuple[tuple[str, str], ...]:
    """Each variable the env steps set, once, with its composed value, in an order that exports correctly in
    sh (see :func:`export_order`)."""
    env: dict[str, str] = {}
    for step in steps:
        if isinstance(step, Env):
            before = dict(env)
            env.update((name, expand(value, before)) for name, value in step.vars)
    return tuple((name, env[name]) for name in export_order(env))


def export_order(env: dict[str, str]) -> list[str]:
    """The names of ``env`` in first-set order, except that a variable whose value still refers to another
    one's base value is exported before that one replaces it (``A="$PATH"`` before ``PATH="/x:$PATH"``)."""
    waiting = {name: {ref for ref in references(value) if ref in env and ref != name} for name, value in env.items()}
    order: list[str] = []
    while waiting:
        # free: no other variable still waiting reads this one's base value
        free = next((n for n in waiting if not any(n in refs for other, refs in waiting.items() if other != n)), None)
        if free is None:
            names = ", ".join(sorted(waiting))
            raise ConfigError(f"environment variables {names} refer to each other's base values (as set before "
                              "the recipe's env steps), which no order of exports in the .def can give",
                              hint="give one of them a value that does not refer to the other")
        order.append(free)
        del waiting[free]
    return order
