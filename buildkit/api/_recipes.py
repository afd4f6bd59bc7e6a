"""Recipes from Python: the catalogue, a resolved stack, its Dockerfile or ``.def`` (``ckit recipes``, ``ckit
show``, ``ckit render``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ._common import Folders, folders


def recipes(*, everything: bool = False, recipes: Folders = ()) -> dict[str, list[dict[str, Any]]]:
    """The stacks, with ``everything`` the bases and add-ons too, each with its one-line description
    (``ckit recipes [--all] --json``)."""
    from ..recipe import describe
    from ..recipe.catalog import Catalog

    return describe.catalogue(Catalog.from_dirs(folders(recipes)), everything=everything)


def show(stack: str, *, sets: Sequence[str] = (), ngc: str | None = None, recipes: Folders = ()) -> dict[str, Any]:
    """The resolved stack: layers, parameters, stack facts (CUDA, driver, NCCL…) and warnings (``ckit show
    --json``)."""
    from ..recipe import describe
    from ..recipe.catalog import Catalog

    catalog = Catalog.from_dirs(folders(recipes))
    return describe.resolved(catalog, catalog.resolve(stack, sets=list(sets), ngc=ngc))


@dataclass(frozen=True)
class Rendered:
    """A stack rendered (``ckit render``): the text, or the build context written to a folder."""

    format: str  # docker or singularity
    text: str
    warnings: tuple[str, ...]
    copies: tuple[str, ...]  # the files the text copies from its build context
    written: tuple[Path, ...] = ()  # the build context's files, when written to a folder

    def as_json(self) -> dict[str, Any]:
        return {"format": self.format, "text": self.text, "warnings": list(self.warnings),
                "copies": list(self.copies), "written": [str(p) for p in self.written]}


def render_recipe(stack: str, *, fmt: str = "docker", sets: Sequence[str] = (), ngc: str | None = None,
                  output: str | Path | None = None, recipes: Folders = ()) -> Rendered:
    """The stack as a Dockerfile (``fmt="docker"``) or a Singularity/Apptainer ``.def`` (``"singularity"``).

    :param output: write the file here (atomically); a folder (an existing one, or a path ending in ``/``)
        gets the whole build context: the file and those it copies.
    :raises ConfigError: an unknown format, or one file for a stack that copies files into the image.
    """
    from ..fs.files import atomic_write
    from ..recipe.catalog import Catalog
    from ..recipe.model import Copy
    from ..render.context import build_context
    from ..render.context import render as render_text
    from ..render.folder import is_folder_target, write_folder

    fmt = fmt.lower()
    if fmt not in ("docker", "singularity"):
        raise ConfigError(f"--format {fmt!r}: choose docker or singularity")
    recipe = Catalog.from_dirs(folders(recipes)).resolve(stack, sets=list(sets), ngc=ngc)
    copies = tuple(s.context for s in recipe.steps if isinstance(s, Copy))
    text = render_text(recipe, fmt)
    rendered = Rendered(fmt, text, tuple(recipe.warnings), copies)
    if output is not None and is_folder_target(str(output)):
        written = write_folder(build_context(recipe, fmt), Path(output))
        return Rendered(fmt, text, rendered.warnings, copies, tuple(written))
    if copies and output is not None:
        raise ConfigError(f"-o {output}: stack {stack} copies files into the image ({', '.join(copies)}), which "
                          f"one file cannot hold", hint=f"write the whole build context: -o {Path(output).stem}/")
    if output is not None:
        atomic_write(Path(output), text.encode())
    return rendered
