"""``--code DIR[:DEST]`` from Python: where the code goes (DEST, else the stack that copies DIR into its image
says) and what the folder holds, read before the launch is planned."""

from __future__ import annotations

from pathlib import Path

from ..errors import CkitError, ConfigError
from ..launch.code import CodeTree, default_index, parse, scan

_UP = 4  # folders above DIR searched for the recipe folder holding it (myproject/ for myproject/app)


def _recipe_folder(folder: Path) -> Path | None:
    """The nearest folder at or above ``folder``'s parent that holds ``stacks/`` (a recipe folder)."""
    for parent in list(folder.parents)[:_UP]:
        if (parent / "stacks").is_dir():
            return parent
    return None


def _declared(recipes: Path, folder: Path) -> dict[str, str]:
    """Stack name -> DEST, for each stack in ``recipes`` with a ``files`` layer whose ``src`` is ``folder``."""
    from ..recipe.catalog import Catalog

    catalog = Catalog.from_dirs([recipes])
    default = next((p.default for p in catalog.addon("files").params if p.name == "dest"), "/workspace/code")
    found: dict[str, str] = {}
    for path in sorted((recipes / "stacks").glob("*.yaml")):
        try:
            stack = catalog.stack(path.stem)
        except CkitError:
            continue  # a broken stack is `ckit show`'s to report, not the launch's
        values = {layer: dict(pairs) for layer, pairs in stack.parameters}
        for layer, addon in stack.addons:
            src = values.get(layer, {}).get("src")
            if addon == "files" and isinstance(src, str) and src and (recipes / src).resolve() == folder:
                found[stack.name] = str(values[layer].get("dest") or default).rstrip("/") or "/"
    return found


def code_dest(folder: Path, given: str) -> str:
    """DEST for ``--code DIR`` without one: the ``dest`` of the ``files`` add-on (``files as code``) of the
    stack, in the recipe folder around DIR, that copies DIR into its image."""
    recipes = _recipe_folder(folder)
    found = _declared(recipes, folder) if recipes else {}
    where = sorted(set(found.values()))
    if len(where) == 1:
        return where[0]
    if where:
        raise ConfigError(f"--code {given}: the stacks of {recipes} copy {folder} to different folders ("
                          + ", ".join(f"{s}: {d}" for s, d in sorted(found.items())) + ")",
                          hint=f"say which: --code {given}:{where[0]}")
    around = f"no stack in {recipes} copies it" if recipes else "no recipe folder (one holding stacks/) holds it"
    raise ConfigError(f"--code {given}: where does {folder} go in the image? {around}",
                      hint=f"give the folder in the image: --code {given}:/workspace/app (the dest of the "
                           "stack's `files as code` add-on)")


def code_tree(value: str, runtime_none: bool = False) -> CodeTree:
    """What ``--code`` ships: the folder, read now (its digest names the job's copy), and its DEST."""
    given, dest = parse(value)
    folder = Path(given).expanduser().resolve()
    if dest is None and not runtime_none and folder.is_dir():
        dest = code_dest(folder, given)
    return scan(Path(given), dest or "", default_index())
