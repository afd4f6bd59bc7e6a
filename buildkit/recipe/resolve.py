"""Resolve a stack: follow ``extends``, apply parameters and overrides, check requirements and
compatibility, and compile every layer into one frozen :class:`ResolvedRecipe`."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from .. import __version__
from ..config.searchpath import suggest
from ..config.yamlfile import Document, KeyPath
from ..errors import CompatError, ConfigError
from ..oci import labels as keys
from .compat import violations
from .environment import compose
from .model import (
    Copy,
    Env,
    Fact,
    FactTable,
    Layer,
    ParamValue,
    ResolvedLayer,
    ResolvedRecipe,
    Run,
    StackDef,
    Step,
)
from .params import check_value, format_value, parse_cli, split_set
from .steps import compile_addon
from .template import expand


class Catalog(Protocol):
    """Where a stack's parts are read from (:class:`.catalog.Catalog`, which resolves through here)."""

    def base(self, name: str) -> Layer: ...
    def addon(self, name: str) -> Layer: ...
    def stack(self, name: str) -> StackDef: ...
    def facts(self, name: str) -> FactTable: ...

_REF = re.compile(r"^[a-z0-9][a-z0-9._:/-]*[a-z0-9](?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")


def _chain(catalog: Catalog, name: str) -> list[StackDef]:
    """The stack and its ancestors, root first."""
    chain: list[StackDef] = []
    seen: list[str] = []
    while name:
        if name in seen:
            raise ConfigError(f"stack '{name}' extends itself: {' -> '.join([*seen, name])}",
                              hint="remove the loop in 'extends:'")
        seen.append(name)
        stack = catalog.stack(name)
        chain.append(stack)
        name = stack.extends
    return list(reversed(chain))


class _Values:
    """Parameter values per layer, with where each came from (for errors and relative paths)."""

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = {layer.name: layer for layer in layers}
        self.values: dict[str, dict[str, ParamValue]] = {
            layer.name: {p.name: p.default for p in layer.params} for layer in layers}
        self.origins: dict[str, dict[str, Path]] = {
            layer.name: {p.name: layer.doc.path.parent.parent for p in layer.params} for layer in layers}

    def _spec(self, layer_name: str, param: str, fail: Callable[[str, str | None], ConfigError]) -> Any:
        layer = self.layers.get(layer_name)
        if layer is None:
            raise fail(f"unknown layer '{layer_name}'", suggest(layer_name, self.layers))
        spec = layer.param(param)
        if spec is None:
            names = [p.name for p in layer.params]
            raise fail(f"unknown parameter '{param}' of {layer.kind} {layer_name}", suggest(param, names))
        return spec

    def from_stack(self, stack: StackDef) -> None:
        doc: Document = stack.doc
        for layer_name, items in stack.parameters:
            for param, raw in items:
                keypath = ("parameters", layer_name, param)

                def fail(msg: str, hint: str | None = None, keypath: KeyPath = keypath) -> ConfigError:
                    return doc.error(keypath, msg, hint=hint)

                if layer_name not in self.layers:
                    raise doc.error(("parameters", layer_name), f"stack {stack.name} sets parameters of "
                                    f"'{layer_name}', which is not one of its layers", hint=suggest(layer_name, self.layers))
                spec = self._spec(layer_name, param, fail)
                self.values[layer_name][param] = check_value(spec, raw, where=fail)
                self.origins[layer_name][param] = doc.path.parent.parent

    def from_cli(self, text: str, flag: str = "--set") -> None:
        layer_name, param, raw = split_set(text)

        def fail(msg: str, hint: str | None = None) -> ConfigError:
            return ConfigError(f"{flag} {text}: {msg}", hint=hint)

        spec = self._spec(layer_name, param, fail)
        self.values[layer_name][param] = parse_cli(spec, raw, where=lambda m: fail(m))
        self.origins[layer_name][param] = Path.cwd()


def _check_ref(ref: str, base: Layer) -> str:
    where = base.doc.where(("image",))
    if not _REF.fullmatch(ref) or ("@" not in ref and ":" not in ref.rsplit("/", 1)[-1]):
        raise ConfigError(f"{where}: base image {ref!r} is not a pinned image reference (REGISTRY/NAME:TAG)",
                          hint="give a tag or a digest")
    if ref.rsplit("/", 1)[-1].split("@")[0].endswith(":latest"):
        raise ConfigError(f"{where}: base image {ref!r} uses the 'latest' tag", hint="pin a version tag")
    return ref


def _facts(catalog: Catalog, base: Layer, values: dict[str, ParamValue], warnings: list[str]) -> tuple[Fact, ...]:
    if not base.facts:
        return ()
    table = catalog.facts(base.facts)
    key = format_value(values.get(table.key, ""))
    row = table.row(key)
    if row is None:
        known = ", ".join(k for k, _ in table.rows)
        warnings.append(f"no facts recorded for {base.name} {table.key} {key} (known: {known}); "
                        f"compatibility checks that need them were skipped")
        return ()
    return row


def _fingerprint(payload: dict[str, Any]) -> str:
    def default(obj: Any) -> Any:
        if isinstance(obj, Path):
            return _tree_digest(obj)
        raise TypeError(type(obj))

    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=default)
    return hashlib.sha256(blob.encode()).hexdigest()


def _tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for item in files:
        digest.update(str(item.relative_to(path) if item != path else item.name).encode() + b"\0")
        digest.update(item.read_bytes())
        digest.update(b"\1" if item.stat().st_mode & 0o111 else b"\0")
    return digest.hexdigest()


def _step_payload(step: Step) -> dict[str, Any]:
    if isinstance(step, Run):
        return {"run": list(step.commands), "env": [list(p) for p in step.env]}
    if isinstance(step, Env):
        return {"env": [list(p) for p in step.vars]}
    assert isinstance(step, Copy)
    return {"copy": step.source, "dest": step.dest}


def _layers(catalog: Catalog, name: str, chain: list[StackDef]) -> tuple[Layer, list[Layer]]:
    """The base and the add-ons in order, each add-on under its name in the stack (its alias, if any)."""
    base_name = next((s.base for s in reversed(chain) if s.base), "")
    instances: dict[str, tuple[StackDef, str]] = {}
    addons: list[Layer] = []
    for member in chain:
        for index, (instance, addon) in enumerate(member.addons):
            earlier = instances.get(instance)
            if earlier is not None or instance == base_name:
                where = f"stack {earlier[0].name}" if earlier and earlier[0] is not member else f"stack {member.name}"
                what = f"add-on '{instance}' is already in {where}" if earlier else f"'{instance}' is the base's name"
                raise member.doc.error(("addons", index), f"{what}: a layer name must be unique in a stack",
                                       hint=f"to add another copy of {addon}, list it as '{addon} as NAME' and set "
                                            f"its parameters under NAME; to change the one {name} has, set "
                                            f"parameters: {{{instance}: …}} instead")
            instances[instance] = (member, addon)
            layer = catalog.addon(addon)
            addons.append(layer if instance == addon else replace(layer, name=instance))
    return catalog.base(base_name), addons


def _file_of(layer: Layer) -> str:
    """The add-on file an aliased layer comes from ("" when the layer has the file's name)."""
    stem = layer.doc.path.name.removesuffix(".yaml")
    return "" if stem == layer.name else stem


def _image(base: Layer, values: dict[str, ParamValue]) -> str:
    return _check_ref(expand(base.image, values, shell=False, where=lambda m: base.doc.error(("image",), m)), base)


def _compile(name: str, catalog: Catalog, base: Layer, addons: list[Layer], values: _Values,
             fact_map: dict[str, str]) -> tuple[list[Step], list[tuple[str, str]], list[str]]:
    """Every add-on's steps and labels, checking what each requires against what is provided before it."""
    provided: list[str] = [*base.provides, *(catalog.facts(base.facts).provides if base.facts else ())]
    steps: list[Step] = []
    labels: list[tuple[str, str]] = []
    path_values = {f"base.{k}": v for k, v in base.paths}
    for addon in addons:
        own = values.values[addon.name]
        needed = [*addon.requires, *("apt" for t in addon.steps if t.apt), *("pip" for t in addon.steps if t.pip)]
        for param in addon.requires_params:
            needed += list(own[param])  # type: ignore[arg-type]
        missing = [cap for cap in dict.fromkeys(needed) if cap not in provided]
        if missing:
            helper = " (the python add-on provides pip: list it before this one)" if missing[0] == "pip" else ""
            raise CompatError(
                f"stack {name}: add-on {addon.name} requires {', '.join(missing)}, which neither base {base.name} "
                f"nor an earlier add-on provides",
                hint=f"use a base that provides {missing[0]}, add an add-on that does before {addon.name}{helper}, "
                     f"or change {addon.name}'s parameters")
        clash = [cap for cap in addon.provides if cap in provided]
        if clash:
            raise CompatError(
                f"stack {name}: add-on {addon.name} provides {', '.join(clash)}, which the stack already has "
                f"(from {base.name} or an earlier add-on)", hint=f"remove {addon.name} from the stack")
        _check_rules(addon, fact_map, own)
        compiled = compile_addon(addon, {**own, **path_values}, origins=values.origins[addon.name],
                                 copy_index=sum(isinstance(s, Copy) for s in steps))
        steps += compiled.steps
        labels += compiled.labels
        provided += addon.provides
    return steps, labels, provided


def resolve(catalog: Catalog, name: str, *, sets: Sequence[str] = (), ngc: str | None = None) -> ResolvedRecipe:
    chain = _chain(catalog, name)
    stack = chain[-1]
    base, addons = _layers(catalog, name, chain)
    values = _Values([base, *addons])
    for member in chain:
        values.from_stack(member)
    if ngc is not None:
        if not base.ngc:
            raise ConfigError(f"--ngc {ngc}: stack {name} is built on {base.name}, which is not an NGC image",
                              hint="use --set to change its parameters")
        values.from_cli(f"{base.name}.release={ngc}", flag="--ngc")
    for text in sets:
        values.from_cli(text)

    warnings: list[str] = []
    base_values = values.values[base.name]
    facts = _facts(catalog, base, base_values, warnings)
    fact_map = {f.name: f.value for f in facts}
    image = _image(base, base_values)
    _check_rules(base, fact_map, base_values)
    steps, labels, provided = _compile(name, catalog, base, addons, values, fact_map)
    entrypoint = next((s.entrypoint for s in reversed(chain) if s.entrypoint is not None), None)
    cmd = next((s.cmd for s in reversed(chain) if s.cmd is not None), None)
    layers = tuple(ResolvedLayer(layer.kind, layer.name, layer.description,
                                 tuple(sorted(values.values[layer.name].items())), _file_of(layer))
                   for layer in [base, *addons])
    parameters = {layer.name: {k: list(v) if isinstance(v, tuple) else v for k, v in layer.params}
                  for layer in layers}
    fingerprint = _fingerprint({
        "ckit": __version__, "stack": name, "image": image, "parameters": parameters,
        "steps": [_step_payload(s) for s in steps], "labels": labels,
        "entrypoint": entrypoint, "cmd": cmd,
    })
    labels = [
        (keys.STACK, name),
        (keys.PARAMETERS, json.dumps(parameters, sort_keys=True, separators=(",", ":"))),
        (keys.VERSION, __version__),
        (keys.FINGERPRINT, fingerprint),
        (keys.BASE_NAME, image),
        *labels,
    ]
    return ResolvedRecipe(
        stack=name, description=stack.description, base_image=image, layers=layers, steps=tuple(steps),
        env=compose(steps), labels=tuple(labels), entrypoint=entrypoint, cmd=cmd, facts=facts,
        provides=tuple(provided), warnings=tuple(warnings), fingerprint=fingerprint, seed=stack.seed,
    )


def _check_rules(layer: Layer, facts: dict[str, str], params: dict[str, ParamValue]) -> None:
    failed = violations(layer.constraints, facts=facts, params=params)
    if failed:
        rule, message = failed[0]
        source = f" (source: {rule.source})" if rule.source else ""
        raise CompatError(f"{layer.kind} {layer.name}: {message}{source}",
                          hint=f"rule at {layer.doc.where(rule.keypath)}")
