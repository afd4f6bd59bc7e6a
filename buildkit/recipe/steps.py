"""Compile an add-on's step templates, with its parameter values, into build steps."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..config.yamlfile import KeyPath
from ..errors import ConfigError
from .model import Copy, Env, Layer, ParamValue, Run, Step, StepTemplate
from .template import expand

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Allowed in env values: anything printable except quotes and backticks; "$" only as $NAME or ${NAME}.
_BAD_DOLLAR = re.compile(r"\$(?![A-Za-z_{])|\$\{(?![A-Za-z_][A-Za-z0-9_]*\})")
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


@dataclass(frozen=True)
class Compiled:
    steps: tuple[Step, ...]
    labels: tuple[tuple[str, str], ...]


def check_env_value(name: str, value: str, where: Callable[[str], ConfigError]) -> str:
    if not _ENV_NAME.fullmatch(name):
        raise where(f"'{name}' is not a valid environment variable name")
    if any(c in value for c in "\n\r\x00\"'`\\") or _BAD_DOLLAR.search(value):
        raise where(f"value of {name} may not contain quotes, backslashes, backticks, newlines or '$' other "
                    f"than $NAME / ${{NAME}} references: {value!r}")
    return value


def check_label(key: str, value: str, where: Callable[[str], ConfigError]) -> tuple[str, str]:
    if not LABEL_KEY.fullmatch(key):
        raise where(f"label key {key!r} must match {LABEL_KEY.pattern}")
    if "\n" in value or "\x00" in value:
        raise where(f"label {key} must be one line")
    return key, value


def _pairs(items: tuple[str, ...], what: str, where: Callable[[str], ConfigError]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise where(f"{what} item {item!r} must be NAME=VALUE")
        out.append((name, value))
    return out


_WHOLE = re.compile(r"^\{([a-z][a-z0-9_]*)\}$")


def _items(templates: tuple[str, ...], values: Mapping[str, ParamValue], where: Callable[[str], ConfigError],
           *, shell: bool) -> list[str]:
    """Expand each item; an item that is exactly ``{list_param}`` becomes that parameter's items, verbatim."""
    out: list[str] = []
    for text in templates:
        whole = _WHOLE.match(text)
        if whole and isinstance(values.get(whole[1]), tuple):
            items = list(values[whole[1]])  # type: ignore[arg-type]
            for item in items:
                if "\n" in item or "\x00" in item:
                    raise where(f"'{whole[1]}' items must be one line each")
            out += items
        else:
            out.append(expand(text, values, shell=shell, where=where))
    return out


def _enabled(step: StepTemplate, values: Mapping[str, ParamValue], where: Callable[[str], ConfigError]) -> bool:
    """``when`` items: ``flag`` / ``!flag`` (bool parameters) or ``param=value`` (string parameters)."""
    for cond in step.when:
        name, sep, wanted = cond.lstrip("!").partition("=")
        value = values.get(name)
        if sep:
            if not isinstance(value, str):
                raise where(f"'when: {cond}' must name a string parameter")
            holds = value == wanted
        elif isinstance(value, bool):
            holds = value
        else:
            raise where(f"'when: {cond}' must name a bool parameter (or be param=value)")
        if holds is cond.startswith("!"):
            return False
    return True


def _copies(tpl: StepTemplate, values: Mapping[str, ParamValue], where: Callable[[str], ConfigError], *,
            origins: Mapping[str, Path], recipe_root: Path, first: int) -> list[Copy]:
    """The step's host files, numbered from ``first`` in the build context (``files/N-NAME``)."""
    out: list[Copy] = []
    for src_t, dest_t in tpl.copy:
        src = expand(src_t, values, shell=False, where=where)
        dest = expand(dest_t, values, shell=False, where=where)
        single = re.fullmatch(r"\{([a-z][a-z0-9_]*)\}", src_t)
        root = origins.get(single[1], recipe_root) if single else recipe_root
        source = Path(src) if Path(src).is_absolute() else (root / src)
        if not source.exists():
            raise where(f"file to copy not found: {source}")
        if not dest.startswith("/") or "\n" in dest or ".." in dest.split("/"):
            raise where(f"copy destination must be an absolute path in the image, got {dest!r}")
        out.append(Copy(source=source.resolve(), dest=dest, context=f"files/{first + len(out)}-{source.name}"))
    return out


def _env_flags(layer: Layer, tpl: StepTemplate, values: Mapping[str, ParamValue],
               where: Callable[[str], ConfigError]) -> list[tuple[str, str]]:
    """``FLAG=1`` for each choice of a list (or bool) parameter, as the step's ``env_flags`` patterns say."""
    env = []
    for param, selected, unselected in tpl.env_flags:
        chosen = values.get(param)
        spec = layer.param(param)
        if spec is None or spec.type not in ("list", "bool"):
            raise where(f"env_flags: '{param}' is not a list or bool parameter")
        options = spec.choices if spec.type == "list" else ("",)
        for choice in options:
            on = choice in chosen if isinstance(chosen, tuple) else bool(chosen)
            pattern = selected if on else unselected
            if pattern:
                flag = pattern.replace("{CHOICE}", choice.upper())
                env.append((flag, check_env_value(flag, "1", where)))
    return env


def _installs(kind: str, names: list[str]) -> tuple[str, ...]:
    """The commands that install ``names`` with apt or pip, leaving no download behind in the layer."""
    packages = " ".join(shlex.quote(p) for p in names)
    if kind == "pip":
        return (f"python3 -m pip install --no-cache-dir {packages}",)
    return (
        "apt-get update",
        f"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {packages}",
        # the downloaded .debs too: a base without docker-clean (one made by mmdebstrap, say) keeps them in the layer
        "apt-get clean",
        "rm -rf /var/lib/apt/lists/*",
    )


def compile_addon(
    layer: Layer,
    values: Mapping[str, ParamValue],
    *,
    origins: Mapping[str, Path],
    copy_index: int,
) -> Compiled:
    """Steps of ``layer`` with ``values`` (its parameters plus ``base.*`` paths) substituted."""
    doc = layer.doc
    recipe_root = doc.path.parent.parent
    steps: list[Step] = []
    labels: list[tuple[str, str]] = []
    for tpl in layer.steps:
        def where(message: str, keypath: KeyPath = tpl.keypath) -> ConfigError:  # noqa: B023 - bound per step
            return doc.error(keypath, f"{layer.name}: {message}")

        if not _enabled(tpl, values, where):
            continue
        env = [(k, check_env_value(k, expand(v, values, shell=False, where=where), where)) for k, v in tpl.env]
        if tpl.run:
            env += _env_flags(layer, tpl, values, where)
            commands = tuple(_items(tpl.run, values, where, shell=True))
            if commands:
                steps.append(Run(commands=commands, env=tuple(env), comment=tpl.comment))
        elif tpl.apt or tpl.pip:
            names = _items(tpl.apt or tpl.pip, values, where, shell=False)
            if names:  # an install's variable left empty (an optional parameter not set) is left out
                steps.append(Run(commands=_installs("apt" if tpl.apt else "pip", names),
                                 env=tuple((k, v) for k, v in env if v), comment=tpl.comment))
        elif tpl.copy:
            copies = _copies(tpl, values, where, origins=origins, recipe_root=recipe_root, first=copy_index + 1)
            copy_index += len(copies)
            steps += copies
        elif tpl.env_from:
            pairs = _pairs(values[tpl.env_from], tpl.env_from, where)  # type: ignore[arg-type]
            steps.append(Env(tuple((k, check_env_value(k, v, where)) for k, v in pairs)))
        elif tpl.label or tpl.label_from:
            raw = list(tpl.label) if tpl.label else _pairs(values[tpl.label_from], tpl.label_from, where)  # type: ignore[arg-type]
            labels += [check_label(k, expand(v, values, shell=False, where=where), where) for k, v in raw]
        elif env:
            steps.append(Env(tuple(env)))
    return Compiled(tuple(steps), tuple(labels))
