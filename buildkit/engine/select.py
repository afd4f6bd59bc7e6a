"""The engines by name, and the choice of one for a build (``--engine NAME`` or ``auto``)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import daemon
from ..config.declared import declared
from ..errors import ConfigError
from .base import Engine

AUTO_ORDER = ("docker", "apptainer")


@functools.cache
def _engines() -> Mapping[str, type[Engine]]:
    """Every engine by name, found by importing each module of this package once (each names its own in
    ``ENGINES``)."""
    found: dict[str, type[Engine]] = {}
    for engines in declared(__package__ or "", Path(__file__).parent, "ENGINES"):
        for cls in engines:
            if cls.name in found:
                raise RuntimeError(f"engine {cls.name!r} is registered twice")
            found[cls.name] = cls
    return found


def engine_names() -> list[str]:
    return sorted(_engines())


def get_engine(name: str) -> Engine:
    try:
        return _engines()[name]()
    except KeyError:
        choices = ", ".join(["auto", *sorted(_engines())])
        raise ConfigError(f"--engine: unknown engine {name!r}", hint=f"choose one of: {choices}") from None


@dataclass(frozen=True)
class Selection:
    engine: Engine
    reason: str


def select_engine(name: str, *, products: tuple[str, ...] = ("image", "sif")) -> Selection:
    """The engine named, or for ``auto`` the first available one (AUTO_ORDER) whose product is in ``products``.

    ConfigError (exit 2) when the named engine cannot build here or, for ``auto``, when none can.
    """
    if name != "auto":
        engine = get_engine(name)
        found = engine.probe()
        if not found.ok:
            raise ConfigError(f"--engine {name}: {found.detail}", hint=_START_HINT.get(name))
        return Selection(engine, f"{name} (requested; {found.detail})")
    tried = []
    for candidate in AUTO_ORDER:
        engine = get_engine(candidate)
        if engine.product not in products:
            continue
        found = engine.probe()
        if found.ok:
            return Selection(engine, f"{candidate} (auto; {found.detail})")
        tried.append(f"{candidate}: {found.detail}")
    raise ConfigError("no build engine is available (" + "; ".join(tried) + ")",
                      hint=_START_HINT["docker"] + ("; or install apptainer" if "sif" in products else ""))


_START_HINT = {
    "docker": daemon.START_HINT,
    "apptainer": "install apptainer (or singularity) and put it on PATH, or use --engine docker",
}


def start_hint(name: str) -> str | None:
    return _START_HINT.get(name)
