"""Backends registered by name: every module of a backend package declares one (or more) in ``BACKENDS``.

Adding a runtime, framework or scheduler is adding one module to its package; the CLI help, the plan's
checks and ``ckit backends`` read the registry, so no table elsewhere names them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar

from ..config.searchpath import suggest
from ..errors import ConfigError


class Named(Protocol):
    name: str
    summary: str


B = TypeVar("B", bound=Named)


class Registry(Generic[B]):
    """The backends of one package, found by importing each of its modules once (on first use)."""

    def __init__(self, package: str, path: Iterable[str], kind: str) -> None:
        self._package, self._path, self.kind = package, list(path), kind
        self._by_name: dict[str, B] | None = None

    def _load(self) -> dict[str, B]:
        if self._by_name is None:
            found: dict[str, B] = {}
            for info in sorted(pkgutil.iter_modules(self._path), key=lambda m: m.name):
                module = importlib.import_module(f"{self._package}.{info.name}")
                for backend in getattr(module, "BACKENDS", ()):
                    if backend.name in found:
                        raise RuntimeError(f"{self.kind} {backend.name!r} is registered twice")
                    found[backend.name] = backend
            self._by_name = found
        return self._by_name

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._load(), key=lambda n: (getattr(self._load()[n], "order", 50), n)))

    def all(self) -> tuple[B, ...]:
        return tuple(self._load()[n] for n in self.names())

    def find(self, name: str) -> B | None:
        return self._load().get(name)

    def get(self, name: str, flag: str) -> B:
        """The backend ``name``; an unknown name is a ConfigError naming ``flag`` with a did-you-mean."""
        backend = self.find(name)
        if backend is None:
            hint = suggest(name, list(self.names()))
            raise ConfigError(f"{flag} {name!r}: unknown {self.kind}",
                              hint=f"{hint}; one of: {', '.join(self.names())}" if hint else
                              f"one of: {', '.join(self.names())}")
        return backend

    def help(self) -> str:
        """``name`` (summary), … for a CLI option's help."""
        return "; ".join(f"{b.name}: {b.summary}" for b in self.all())
