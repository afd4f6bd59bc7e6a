"""YAML documents that remember where each key came from, and schema validation that says so.

``load`` reads a file with the safe loader and records the line of every key and item, so an error can
name the file, the key path and the line. ``validate`` checks a document against a JSON schema and turns
the first error into one :class:`~buildkit.errors.ConfigError` with a "did you mean" hint for unknown keys.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import ConfigError
from ..fs.files import read_capped
from . import limits
from .schemacheck import conforms, matches

if TYPE_CHECKING:
    import jsonschema

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Document:
    """A parsed YAML file: its data and the 1-based line of each key path."""

    path: Path
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line_of(self, keypath: KeyPath) -> int | None:
        """Line of ``keypath``, or of its nearest ancestor that has one."""
        while keypath:
            if keypath in self.lines:
                return self.lines[keypath]
            keypath = keypath[:-1]
        return self.lines.get((), None)

    def where(self, keypath: KeyPath) -> str:
        line = self.line_of(keypath)
        return f"{self.path}:{line}" if line else str(self.path)

    def error(self, keypath: KeyPath, message: str, *, hint: str | None = None) -> ConfigError:
        key = format_keypath(keypath)
        at = f" at '{key}'" if key else ""
        return ConfigError(f"{self.where(keypath)}: {message}{at}", hint=hint)


def format_keypath(keypath: KeyPath) -> str:
    out = ""
    for part in keypath:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _walk(root: yaml.Node, lines: dict[KeyPath, int], path: Path) -> None:
    """Record the line of every key path (aliases expanded, as the data will be), refusing a document that
    expands to more than the ``yaml_values`` limit: a few lines of nested aliases ("billion laughs") would
    otherwise expand to billions of values here and in everything that reads the data."""
    budget = limits.size("yaml_values")
    pending: list[tuple[yaml.Node, KeyPath]] = [(root, ())]
    while pending:
        node, keypath = pending.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(f"{path}: the document expands to more than {limits.size('yaml_values')} values "
                              "(YAML aliases)", hint="write the values out; CKIT_MAX_YAML_VALUES raises the limit")
        lines.setdefault(keypath, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                line = key_node.start_mark.line + 1
                if not isinstance(key_node, yaml.ScalarNode):
                    raise ConfigError(f"{path}:{line}: a key must be a plain value, not a list or mapping")
                key = key_node.value
                if key in seen:
                    raise ConfigError(
                        f"{path}:{line}: duplicate key '{format_keypath((*keypath, key))}' (first at line "
                        f"{seen[key]})", hint="remove one of the two")
                seen[key] = line
                lines[(*keypath, key)] = line
                pending.append((value_node, (*keypath, key)))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                lines[(*keypath, index)] = item.start_mark.line + 1
                pending.append((item, (*keypath, index)))


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing documents nested deeper than the ``nesting`` limit (PyYAML composes and
    constructs recursively: a deep document would end in RecursionError)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth, self.max_depth = 0, limits.size("nesting")

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > self.max_depth:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]  # untyped in the stubs
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {self.max_depth} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def parse(text: str, path: Path) -> Document:
    """Parse YAML text. Syntax errors become a ConfigError naming the file and line."""
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            lines: dict[KeyPath, int] = {}
            if node is not None:
                _walk(node, lines, path)  # before constructing: the walk refuses what would expand too far
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except RecursionError as err:
        raise ConfigError(f"{path}: the YAML nests too deeply to be read", hint="flatten the document") from err
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f":{mark.line + 1}" if mark else ""
        problem = err.problem or err.context or "invalid YAML"
        raise ConfigError(f"{path}{line}: {problem}", hint="fix the YAML syntax") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: {err}", hint="fix the YAML syntax") from err
    return Document(path=path, data=data, lines=lines)


def load(path: Path) -> Document:
    """Read and parse a YAML file: a regular file of at most the ``file_size`` limit, in UTF-8."""
    try:
        text = read_capped(path, limits.size("file_size"), "YAML file").decode("utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    return parse(text, path)


def _known_keys(schema: dict[str, Any]) -> list[str]:
    return sorted(schema.get("properties", {}))


def _describe(error: jsonschema.ValidationError) -> tuple[KeyPath, str, str | None]:
    """Key path, message and hint for one schema error."""
    keypath: KeyPath = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = _known_keys(schema)
        patterns = list(schema.get("patternProperties", {}))
        extras = sorted(k for k in error.instance if k not in known and not any(matches(p, k) for p in patterns))
        if extras:
            extra = extras[0]
            close = difflib.get_close_matches(str(extra), known, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else (f"known keys: {', '.join(known)}" if known else None)
            return (*keypath, extra), f"unknown key '{extra}'", hint
    if error.validator == "required" and isinstance(error.validator_value, list):
        missing = [k for k in error.validator_value if isinstance(error.instance, dict) and k not in error.instance]
        if missing:
            return keypath, f"missing required key '{missing[0]}'", f"add '{missing[0]}:'"
    if error.validator == "enum" and isinstance(error.validator_value, list):
        choices = ", ".join(str(c) for c in error.validator_value)
        close = difflib.get_close_matches(str(error.instance), [str(c) for c in error.validator_value], n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"choose one of: {choices}"
        return keypath, f"{error.instance!r} is not one of: {choices}", hint
    if error.validator == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        return keypath, f"expected {expected}, got {type(error.instance).__name__} {error.instance!r}", None
    if error.validator == "pattern":
        desc = schema.get("description")
        return keypath, f"{error.instance!r} does not match the expected form", desc
    return keypath, error.message, schema.get("description")


def _validator_class() -> Any:
    """Draft 2020-12, with ``pattern`` read as the standard reads it (:func:`.schemacheck.matches`)."""
    import jsonschema

    def pattern(validator: Any, value: str, instance: Any, _schema: dict[str, Any]) -> Iterator[Any]:
        if validator.is_type(instance, "string") and not matches(value, instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {value!r}")

    return jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        jsonschema.Draft202012Validator, {"pattern": pattern})


def validate(doc: Document, schema: dict[str, Any], *, kind: str) -> None:
    """Raise a ConfigError for the first (most relevant) schema violation in ``doc``."""
    if conforms(doc.data, schema):  # the usual case, decided without importing jsonschema (see schemacheck)
        return
    import jsonschema  # imported here: only a document the quick check cannot vouch for pays for it

    validator = _validator_class()(schema)
    errors = list(validator.iter_errors(doc.data))
    if not errors:
        return
    # Prefer the deepest error: it points closest to the real mistake.
    error = max(errors, key=lambda e: (len(e.absolute_path), -len(list(e.context or []))))
    if error.context:
        error = jsonschema.exceptions.best_match(error.context)
    keypath, message, hint = _describe(error)
    raise doc.error(keypath, f"invalid {kind}: {message}", hint=hint)


def with_top_level(text: str, path: Path, blocks: dict[str, Any]) -> str:
    """``text`` with each top-level key of ``blocks`` written anew, in its place or appended; every other line stays
    as its author wrote it, comments included (a dump of the whole document would drop them). The caller checks
    the result reads back as meant: a document in flow style (``{a: 1, b: 2}``) has no lines to replace."""
    for key, value in blocks.items():
        lines = text.splitlines(keepends=True)
        at = parse(text, path).lines
        dumped = yaml.safe_dump({key: value}, sort_keys=False, width=110)
        if (key,) not in at:
            text = "".join(lines) + ("\n" if lines and not lines[-1].endswith("\n") else "") + dumped
            continue
        start = at[(key,)] - 1
        end = min((at[k] - 1 for k in at if len(k) == 1 and at[k] - 1 > start), default=len(lines))
        while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
            end -= 1  # the blank lines and comments above the next key are that key's
        text = "".join(lines[:start]) + dumped + "".join(lines[end:])
    return text
