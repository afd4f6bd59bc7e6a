"""The recipe catalogue: built-in recipes with user folders layered over them."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

from ..config.searchpath import SearchPath
from .load import load_facts, load_layer, load_stack
from .model import FactTable, Layer, ResolvedRecipe, StackDef

ENV_VAR = "CKIT_RECIPES_PATH"


class Catalog:
    """Finds and loads bases, add-ons, stacks and fact tables (each file is read once)."""

    def __init__(self, search: SearchPath) -> None:
        self.search = search
        self._layer = cache(self._load_layer)
        self._stack = cache(lambda name: load_stack(self.search.require("stacks", name, what="stack")))
        self._facts = cache(lambda name: load_facts(self.search.require("facts", name, what="fact table")))

    @classmethod
    def from_dirs(cls, dirs: Sequence[Path] = ()) -> Catalog:
        """The built-ins, ``CKIT_RECIPES_PATH`` and ``dirs`` (the CLI's ``--recipes``), last one wins."""
        return cls(SearchPath.build("recipes", list(dirs), ENV_VAR))

    def _load_layer(self, kind: str, name: str) -> Layer:
        folder = "bases" if kind == "base" else "addons"
        return load_layer(self.search.require(folder, name, what=kind.replace("addon", "add-on")), kind)

    def base(self, name: str) -> Layer:
        return self._layer("base", name)

    def addon(self, name: str) -> Layer:
        return self._layer("addon", name)

    def stack(self, name: str) -> StackDef:
        return self._stack(name)

    def facts(self, name: str) -> FactTable:
        return self._facts(name)

    def stack_names(self) -> list[str]:
        return self.search.names("stacks")

    def base_names(self) -> list[str]:
        return self.search.names("bases")

    def addon_names(self) -> list[str]:
        return self.search.names("addons")

    def resolve(self, stack: str, sets: Sequence[str] = (), ngc: str | None = None) -> ResolvedRecipe:
        from .resolve import resolve

        return resolve(self, stack, sets=sets, ngc=ngc)
