"""The quick schema check (config.schemacheck) never vouches for a document jsonschema rejects, and vouches for
every recipe and site ckit ships (so a ``ckit build`` does not import jsonschema)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from buildkit.config.schemacheck import conforms
from buildkit.recipe.schema import FOLDERS, SCHEMAS
from buildkit.site.load import SITE_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
ODD_VALUES = (None, True, 1.0, "Bad Name", [1], {"x": 1})


def shipped() -> list[tuple[Path, dict[str, Any], dict[str, Any]]]:
    docs = [(path, yaml.safe_load(path.read_text()), SCHEMAS[kind])
            for kind, folder in FOLDERS.items() for path in sorted((ROOT / "recipes" / folder).glob("*.yaml"))]
    docs += [(path, yaml.safe_load(path.read_text()), SITE_SCHEMA) for path in sorted((ROOT / "sites").glob("*.yaml"))]
    assert len(docs) > 30
    return docs


def valid(doc: Any, schema: dict[str, Any]) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(doc)


def test_every_shipped_recipe_and_site_passes_the_quick_check() -> None:
    for path, doc, schema in shipped():
        assert valid(doc, schema), path
        assert conforms(doc, schema), f"{path}: the quick check cannot vouch for it (ckit build would import jsonschema)"


def _paths(node: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*at, key))
    elif isinstance(node, list):
        for n, value in enumerate(node):
            yield from _paths(value, (*at, n))


def _mutants(doc: Any) -> Iterator[Any]:
    """Every value replaced by odd ones, every key dropped, an unknown key added to every mapping, an item added
    to every list: whatever the schema says of each, the quick check must not say more."""
    for path in _paths(doc):
        if not path:
            continue
        *parent_path, last = path
        for replacement in (*ODD_VALUES, "__drop__"):
            mutant = copy.deepcopy(doc)
            parent = mutant
            for key in parent_path:
                parent = parent[key]
            if replacement == "__drop__":
                del parent[last]
            else:
                parent[last] = replacement
            yield mutant
    for path in _paths(doc):
        mutant = copy.deepcopy(doc)
        node = mutant
        for key in path:
            node = node[key]
        if isinstance(node, dict):
            node["unknown_key"] = "x"
            yield mutant
        elif isinstance(node, list):
            node.append({"x": 1})
            yield mutant


def test_the_quick_check_never_vouches_for_what_jsonschema_rejects() -> None:
    rejected = vouched = 0
    for path, doc, schema in shipped():
        validator = jsonschema.Draft202012Validator(schema)
        for mutant in _mutants(doc):
            ok = validator.is_valid(mutant)
            rejected += not ok
            if conforms(mutant, schema):
                vouched += 1
                assert ok, f"{path}: the quick check passed a document jsonschema rejects: {mutant}"
    assert rejected > 1000 and vouched > 1000  # both kinds of answer were exercised


@pytest.mark.parametrize(("instance", "schema"), [
    (True, {"type": "integer"}),  # a bool is no number in JSON
    (1, {"enum": [True]}),
    (True, {"const": 1}),
    ({"fact": "a", "param": "b"}, {"oneOf": [{"required": ["fact"]}, {"required": ["param"]}]}),  # both: not one
    ({}, {"oneOf": [{"required": ["fact"]}, {"required": ["param"]}]}),
    ("a", {"oneOf": [{"type": "string"}, {"type": "string", "pattern": "a"}]}),
    ({"a": 1}, {"type": "object", "additionalProperties": False}),
    ({"b": 1}, {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}}),
    ("ab", {"pattern": "^a$"}),
    (0, {"minimum": 1}),
    ([], {"minItems": 1}),
    ({}, {"minProperties": 1}),
    ({"Bad": 1}, {"propertyNames": {"pattern": "^[a-z]+$"}}),
    (["x", 1], {"items": {"type": "string"}}),
])
def test_violations_are_left_to_jsonschema(instance: Any, schema: dict[str, Any]) -> None:
    assert not valid(instance, schema)
    assert not conforms(instance, schema)


@pytest.mark.parametrize(("instance", "schema"), [
    (1.0, {"type": "integer"}),  # valid in JSON Schema; the quick check is stricter and defers
    (1, {"enum": [1.0]}),
    ({"a": 1}, {"type": "object", "patternProperties": {"^a$": {}}, "additionalProperties": False}),
    ("x", {"format": "uri"}),  # a keyword it does not know
    ([1], {"enum": [[1]]}),
])
def test_what_it_cannot_tell_it_leaves_to_jsonschema(instance: Any, schema: dict[str, Any]) -> None:
    assert valid(instance, schema)
    assert not conforms(instance, schema)


def test_a_patterns_dollar_is_the_end_of_the_text_not_before_a_last_newline(tmp_path: Path) -> None:
    """JSON Schema's $ (ECMA 262) is the end; Python's also matched before a final newline: a site named "evil\\n"
    passed ^[a-z][a-z0-9_-]*$ and ended the comment line of its job scripts early."""
    from buildkit.config.yamlfile import Document, validate
    from buildkit.errors import ConfigError

    for pattern in ("^[a-z]+$", "[a-z]$"):
        assert conforms("evil", {"type": "string", "pattern": pattern})
        assert not conforms("evil\n", {"type": "string", "pattern": pattern})
    assert conforms("cost$", {"type": "string", "pattern": "t\\$"})  # a literal dollar stays one
    data = yaml.safe_load((ROOT / "sites" / "local.yaml").read_text())
    for name in ("local\n", "\nlocal"):
        with pytest.raises(ConfigError, match="does not match the expected form at 'name'"):
            validate(Document(tmp_path / "local.yaml", {**data, "name": name}), SITE_SCHEMA, kind="site profile")
