"""Read recipe files: YAML → schema check → frozen model values. Errors name file, line and key."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ..config import yamlfile
from ..config.yamlfile import Document
from ..errors import ConfigError
from .model import Condition, Constraint, Fact, FactTable, Layer, ParamSpec, StackDef, StepTemplate
from .params import check_value
from .schema import SCHEMAS


def read(path: Path, kind: str) -> Document:
    doc = yamlfile.load(path)
    if not isinstance(doc.data, dict):
        raise doc.error((), f"a {kind} file must be a YAML mapping", hint=f"start the file with 'kind: {kind}'")
    found = doc.data.get("kind")
    if found != kind:
        raise doc.error(("kind",), f"expected 'kind: {kind}', found {found!r}",
                        hint=f"files in {path.parent.name}/ are {kind}s")
    yamlfile.validate(doc, SCHEMAS[kind], kind=kind)
    return doc


def _tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def _params(doc: Document) -> tuple[ParamSpec, ...]:
    specs = []
    for name, raw in (doc.data.get("parameters") or {}).items():
        spec = ParamSpec(
            name=name,
            type=raw["type"],
            default=raw["default"],  # checked below, then normalised
            description=raw["description"],
            choices=_tuple(raw.get("choices")),
            pattern=raw.get("pattern"),
        )
        default = check_value(spec, raw["default"], where=functools.partial(doc.error, ("parameters", name, "default")))
        specs.append(ParamSpec(spec.name, spec.type, default, spec.description, spec.choices, spec.pattern))
    return tuple(specs)


def _conditions(raw: list[dict[str, Any]]) -> tuple[Condition, ...]:
    out = []
    for item in raw:
        subject = f"fact:{item['fact']}" if "fact" in item else f"param:{item['param']}"
        ops = [k for k in item if k not in ("fact", "param")]
        for op in ops:
            out.append(Condition(subject, op, str(item[op])))
    return tuple(out)


def _constraints(doc: Document) -> tuple[Constraint, ...]:
    return tuple(
        Constraint(_conditions(c["when"]), _conditions(c["then"]), c["message"], c.get("source", ""),
                   ("constraints", i))
        for i, c in enumerate(doc.data.get("constraints") or [])
    )


def _env_pairs(raw: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
    return tuple((k, _scalar(v)) for k, v in (raw or {}).items())


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _steps(doc: Document) -> tuple[StepTemplate, ...]:
    steps = []
    for i, raw in enumerate(doc.data.get("steps") or []):
        keypath = ("steps", i)
        actions = [k for k in ("run", "apt", "pip", "copy", "env_from", "label", "label_from") if k in raw]
        if len(actions) > 1 or (not actions and "env" not in raw) or (actions and actions[0] not in ("run", "apt", "pip") and "env" in raw):
            raise doc.error(keypath, "a step needs exactly one of run, env, env_from, label, label_from, apt, pip, copy",
                            hint="split it into several steps")
        if "env_flags" in raw and "run" not in raw:
            raise doc.error((*keypath, "env_flags"), "env_flags goes with a run step")
        flags = tuple((param, f["selected"], f.get("unselected", ""))
                      for param, f in (raw.get("env_flags") or {}).items())
        for j, command in enumerate(_tuple(raw.get("run"))):
            if "\n" in command.strip():
                raise doc.error((*keypath, "run", j), "a run command must be one line",
                                hint="use one list item per command, or copy a script in and run it")
        steps.append(StepTemplate(
            run=tuple(c.strip() for c in _tuple(raw.get("run"))),
            env=_env_pairs(raw.get("env")),
            apt=_tuple(raw.get("apt")),
            pip=_tuple(raw.get("pip")),
            copy=tuple((c["src"], c["dest"]) for c in raw.get("copy") or []),
            env_from=raw.get("env_from", ""),
            label=_env_pairs(raw.get("label")),
            label_from=raw.get("label_from", ""),
            env_flags=flags,
            when=_tuple(raw.get("when")),
            comment=raw.get("comment", ""),
            keypath=keypath,
        ))
    return tuple(steps)


def load_layer(path: Path, kind: str) -> Layer:
    doc = read(path, kind)
    data = doc.data
    name = path.name.removesuffix(".yaml")
    layer = Layer(
        kind=kind,
        name=name,
        description=data["description"],
        params=_params(doc),
        doc=doc,
        requires=_tuple(data.get("requires")),
        requires_params=_tuple(data.get("requires_params")),
        provides=_tuple(data.get("provides")),
        steps=_steps(doc) if kind == "addon" else (),
        constraints=_constraints(doc),
        image=data.get("image", ""),
        ngc=bool(data.get("ngc", False)),
        facts=data.get("facts", ""),
        paths=tuple((k, str(v)) for k, v in (data.get("paths") or {}).items()),
    )
    list_params = [*layer.requires_params, *(s.env_from for s in layer.steps if s.env_from),
                   *(s.label_from for s in layer.steps if s.label_from)]
    for param in list_params:
        spec = layer.param(param)
        if spec is None or spec.type != "list":
            raise doc.error((), f"'{param}' is named as a list parameter but {name} has no list parameter '{param}'")
    if kind == "base" and layer.ngc and layer.param("release") is None:
        raise doc.error(("ngc",), "an NGC base needs a 'release' parameter")
    return layer


def load_stack(path: Path) -> StackDef:
    doc = read(path, "stack")
    data = doc.data
    name = path.name.removesuffix(".yaml")
    if not data.get("base") and not data.get("extends"):
        raise doc.error((), f"stack {name} needs 'base:' or 'extends:'", hint="add 'base: debian' for example")
    return StackDef(
        name=name,
        description=data["description"],
        doc=doc,
        extends=data.get("extends", ""),
        base=data.get("base", ""),
        addons=tuple(_addon_entry(entry) for entry in _tuple(data.get("addons"))),
        parameters=tuple((layer, tuple(values.items())) for layer, values in (data.get("parameters") or {}).items()),
        entrypoint=_tuple(data["entrypoint"]) if "entrypoint" in data else None,
        cmd=_tuple(data["cmd"]) if "cmd" in data else None,
        seed=data.get("seed", ""),
    )


def _addon_entry(entry: str) -> tuple[str, str]:
    """``files`` -> (files, files); ``files as code`` -> (code, files). The schema checked the form."""
    addon, _, alias = entry.partition(" as ")
    return (alias or addon), addon


def load_facts(path: Path) -> FactTable:
    doc = read(path, "facts")
    data = doc.data
    columns = _tuple(data["columns"])
    rows = []
    for release, raw in data["releases"].items():
        unverified = set(_tuple(raw.get("unverified")))
        unknown = sorted(set(unverified) - set(columns)) + sorted(set(raw) - set(columns) - {"unverified"})
        if unknown:
            raise doc.error(("releases", release), f"unknown fact '{unknown[0]}'",
                            hint=f"facts are: {', '.join(columns)}")
        facts = tuple(Fact(col, str(raw[col]), col not in unverified) for col in columns if col in raw)
        rows.append((str(release), facts))
    if not columns:
        raise ConfigError(f"{path}: a fact table needs columns")
    return FactTable(
        name=path.name.removesuffix(".yaml"),
        description=data["description"],
        key=data["key"],
        columns=columns,
        provides=_tuple(data.get("provides")),
        rows=tuple(rows),
        doc=doc,
        sources=_tuple(data.get("sources")),
    )
