"""Frozen values of the recipe layer: parameter specs, build steps, layers and the resolved recipe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.yamlfile import Document

ParamValue = str | int | bool | tuple[str, ...]


@dataclass(frozen=True)
class ParamSpec:
    """A typed parameter of a base or add-on."""

    name: str
    type: str  # "string" | "int" | "bool" | "list"
    default: ParamValue
    description: str
    choices: tuple[str, ...] = ()
    pattern: str | None = None


# --- build steps (the primitives every layer compiles to) -------------------------------------------


@dataclass(frozen=True)
class Env:
    """Variables set for the following build steps and present at run time."""

    vars: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Run:
    """Shell commands run at build time; ``env`` is set for these commands only."""

    commands: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    comment: str = ""


@dataclass(frozen=True)
class Copy:
    """A host file or folder copied into the image; ``context`` is its name inside the build context."""

    source: Path
    dest: str
    context: str


Step = Env | Run | Copy


@dataclass(frozen=True)
class StepTemplate:
    """A step as written in an add-on, before parameters are substituted.

    Exactly one action is set (``env`` may also accompany ``run``). ``when`` names bool parameters that must
    all be true (``!name`` for false). ``env_flags`` maps a list or bool parameter to variables set to ``1``.
    """

    run: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    apt: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    copy: tuple[tuple[str, str], ...] = ()
    env_from: str = ""
    label: tuple[tuple[str, str], ...] = ()
    label_from: str = ""
    env_flags: tuple[tuple[str, str, str], ...] = ()  # (param, selected-pattern, unselected-pattern)
    when: tuple[str, ...] = ()
    comment: str = ""
    keypath: tuple[str | int, ...] = ()


@dataclass(frozen=True)
class Condition:
    """``subject`` is ``fact:NAME`` or ``param:NAME``; ``op`` one of equals/at_least/at_most/matches/contains."""

    subject: str
    op: str
    value: str


@dataclass(frozen=True)
class Constraint:
    """If every ``when`` holds, every ``then`` must hold, or the stack is impossible (``message`` says why)."""

    when: tuple[Condition, ...]
    then: tuple[Condition, ...]
    message: str
    source: str = ""
    keypath: tuple[str | int, ...] = ()


@dataclass(frozen=True)
class Layer:
    """A base or an add-on as loaded from its YAML file."""

    kind: str  # "base" | "addon"
    name: str
    description: str
    params: tuple[ParamSpec, ...]
    doc: Document
    requires: tuple[str, ...] = ()
    requires_params: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    steps: tuple[StepTemplate, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    # bases only
    image: str = ""
    ngc: bool = False
    facts: str = ""
    paths: tuple[tuple[str, str], ...] = ()

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass(frozen=True)
class StackDef:
    """A stack as loaded from its YAML file (before ``extends`` is followed)."""

    name: str
    description: str
    doc: Document
    extends: str = ""
    base: str = ""
    addons: tuple[tuple[str, str], ...] = ()  # (layer name in this stack, add-on file): (code, files) for "files as code"
    parameters: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    seed: str = ""


@dataclass(frozen=True)
class Fact:
    name: str
    value: str
    verified: bool


@dataclass(frozen=True)
class FactTable:
    """Per-release facts of an image family (NGC PyTorch, NGC TensorFlow…)."""

    name: str
    description: str
    key: str
    columns: tuple[str, ...]
    provides: tuple[str, ...]
    rows: tuple[tuple[str, tuple[Fact, ...]], ...]
    doc: Document
    sources: tuple[str, ...] = ()

    def row(self, key: str) -> tuple[Fact, ...] | None:
        return next((facts for k, facts in self.rows if k == key), None)


@dataclass(frozen=True)
class ResolvedLayer:
    kind: str
    name: str  # the layer's name in the stack: its file name, or the alias of `NAME as ALIAS`
    description: str
    params: tuple[tuple[str, ParamValue], ...]
    file: str = ""  # the file NAME of an aliased add-on ("" when it is the name)


@dataclass(frozen=True)
class ResolvedRecipe:
    """The one frozen description both renderers read. Nothing downstream looks values up by string path."""

    stack: str
    description: str
    base_image: str
    layers: tuple[ResolvedLayer, ...]
    steps: tuple[Step, ...]
    env: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    entrypoint: tuple[str, ...] | None
    cmd: tuple[str, ...] | None
    facts: tuple[Fact, ...]
    provides: tuple[str, ...]
    warnings: tuple[str, ...]
    fingerprint: str
    seed: str = ""

    @property
    def parameters(self) -> dict[str, dict[str, ParamValue]]:
        return {layer.name: dict(layer.params) for layer in self.layers}

    @property
    def base(self) -> ResolvedLayer:
        return self.layers[0]
