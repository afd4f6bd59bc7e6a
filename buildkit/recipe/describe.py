"""Plain-data descriptions of recipes for `ckit recipes` and `ckit show` (text and --json)."""

from __future__ import annotations

from typing import Any

from .catalog import Catalog
from .model import Layer, ResolvedRecipe
from .params import format_value


def catalogue(catalog: Catalog, *, everything: bool) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {
        "stacks": [{"name": n, "description": catalog.stack(n).description, "seed": catalog.stack(n).seed}
                   for n in catalog.stack_names()]}
    if everything:
        out["bases"] = [{"name": n, "description": catalog.base(n).description} for n in catalog.base_names()]
        out["addons"] = [{"name": n, "description": catalog.addon(n).description} for n in catalog.addon_names()]
    return out


def _layer(catalog: Catalog, kind: str, name: str) -> Layer:
    return catalog.base(name) if kind == "base" else catalog.addon(name)


def resolved(catalog: Catalog, recipe: ResolvedRecipe) -> dict[str, Any]:
    layers = []
    for layer in recipe.layers:
        spec = _layer(catalog, layer.kind, layer.file or layer.name)
        params = {}
        for name, value in layer.params:
            p = spec.param(name)
            assert p is not None
            params[name] = {"value": list(value) if isinstance(value, tuple) else value,
                            "default": list(p.default) if isinstance(p.default, tuple) else p.default,
                            "description": p.description, **({"choices": list(p.choices)} if p.choices else {})}
        layers.append({"kind": layer.kind, "name": layer.name, "description": layer.description,
                       "parameters": params, **({"file": layer.file} if layer.file else {})})
    return {
        "stack": recipe.stack, "description": recipe.description, "seed": recipe.seed,
        "image": recipe.base_image, "fingerprint": recipe.fingerprint, "layers": layers,
        "facts": [{"name": f.name, "value": f.value, "verified": f.verified} for f in recipe.facts],
        "provides": list(recipe.provides), "env": dict(recipe.env), "labels": dict(recipe.labels),
        "entrypoint": list(recipe.entrypoint) if recipe.entrypoint is not None else None,
        "cmd": list(recipe.cmd) if recipe.cmd is not None else None,
        "warnings": list(recipe.warnings),
    }


def show_text(data: dict[str, Any]) -> str:
    lines = [f"stack {data['stack']}: {data['description']}"]
    if data["seed"]:
        lines.append(f"  reproduces: {data['seed']}")
    lines += [f"  image: {data['image']}", f"  fingerprint: {data['fingerprint'][:16]}", ""]
    for layer in data["layers"]:
        alias = f" ({layer['file']} as {layer['name']})" if layer.get("file") else ""
        lines.append(f"{layer['kind']} {layer['name']}{alias}: {layer['description']}")
        rows = []
        for name, p in layer["parameters"].items():
            value = format_value(tuple(p["value"]) if isinstance(p["value"], list) else p["value"])
            rows.append((name, (value if value != "" else '""') + ("" if p["value"] == p["default"] else " (set)"),
                         p["description"]))
        if rows:
            w1, w2 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
            lines += [f"  {n:<{w1}} = {v:<{w2}}  {d}" for n, v, d in rows]
    if data["facts"]:
        lines += ["", "facts:"]
        width = max(len(f["name"]) for f in data["facts"])
        lines += [f"  {f['name']:<{width}} {f['value']}{'' if f['verified'] else '  (unverified)'}"
                  for f in data["facts"]]
    lines += ["", f"provides: {', '.join(data['provides'])}"]
    if data["env"]:
        lines.append("env: " + ", ".join(f"{k}={v}" for k, v in data["env"].items()))
    if data["entrypoint"] is not None or data["cmd"] is not None:
        lines.append(f"entrypoint: {data['entrypoint']}  cmd: {data['cmd']}")
    lines += [f"warning: {w}" for w in data["warnings"]]
    return "\n".join(lines) + "\n"
