"""What the modules of a package declare about themselves: how parts registered by name are found (an image
source module's ``READERS``, an engine module's ``ENGINES``), so that adding one is adding its module."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any


def declared(package: str, folder: Path, attribute: str) -> list[Any]:
    """The values of ``attribute`` in every module of ``package`` (at ``folder``), in module name order; each
    module is imported once (by Python's module cache)."""
    values = []
    for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda m: m.name):
        module = importlib.import_module(f"{package}.{info.name}")
        if hasattr(module, attribute):
            values.append(getattr(module, attribute))
    return values
