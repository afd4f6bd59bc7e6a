"""JSON schemas of the recipe files. Every key is documented here once, in its ``description``."""

from __future__ import annotations

from typing import Any

NAME = r"^[a-z][a-z0-9-]*$"
PARAM_NAME = r"^[a-z][a-z0-9_]*$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
ADDON_ENTRY = r"^[a-z][a-z0-9-]*( as [a-z][a-z0-9-]*)?$"  # NAME, or NAME as ALIAS

_string_list = {"type": "array", "items": {"type": "string"}}
_env_map = {
    "type": "object",
    "description": "Environment variables, NAME: value. Values may refer to other variables as $NAME or ${NAME}.",
    "propertyNames": {"pattern": ENV_NAME},
    "additionalProperties": {"type": ["string", "number", "boolean"]},
}

PARAMETER = {
    "type": "object",
    "description": "A typed parameter that users set with --set LAYER.NAME=VALUE.",
    "additionalProperties": False,
    "required": ["type", "default", "description"],
    "properties": {
        "type": {"enum": ["string", "int", "bool", "list"], "description": "Value type."},
        "default": {"description": "Value used when nothing overrides it."},
        "description": {"type": "string", "description": "One line shown by `ckit show`."},
        "choices": {**_string_list, "description": "Allowed values (for a list: allowed items)."},
        "pattern": {"type": "string", "description": "Regular expression a string value must match."},
    },
}

CONDITION = {
    "type": "object",
    "description": "A test on a stack fact (fact:) or a layer parameter (param:).",
    "additionalProperties": False,
    "properties": {
        "fact": {"type": "string", "description": "Name of a fact of the base image (e.g. pytorch)."},
        "param": {"type": "string", "description": "Name of a parameter of this layer."},
        "equals": {"type": "string"},
        "at_least": {"type": "string", "description": "Version comparison: value >= this."},
        "at_most": {"type": "string", "description": "Version comparison: value <= this."},
        "below": {"type": "string", "description": "Version comparison: value < this."},
        "matches": {"type": "string", "description": "Regular expression the value must match."},
        "contains": {"type": "string", "description": "A list parameter holds this item."},
    },
    "oneOf": [{"required": ["fact"]}, {"required": ["param"]}],
}

CONSTRAINT = {
    "type": "object",
    "description": "A compatibility rule checked before anything is built.",
    "additionalProperties": False,
    "required": ["when", "then", "message"],
    "properties": {
        "when": {"type": "array", "items": CONDITION, "description": "All must hold for the rule to apply."},
        "then": {"type": "array", "items": CONDITION, "description": "All must hold, or the stack is impossible."},
        "message": {"type": "string", "description": "Why, and what to change. {fact}/{param} names expand."},
        "source": {"type": "string", "description": "Where the rule comes from (issue, release note)."},
    },
}

STEP = {
    "type": "object",
    "description": "One build step: exactly one of run, env, env_from, label, label_from, apt, pip, copy.",
    "additionalProperties": False,
    "properties": {
        "run": {"oneOf": [{"type": "string"}, _string_list],
                "description": "Shell commands, one per item, each on one line; they run in order and stop at the "
                               "first failure. {param} expands to the shell-quoted parameter value."},
        "env": {**_env_map, "description": "With run, apt or pip: variables for these commands only (with apt or "
                                           "pip, one that expands to nothing is left out). Alone: variables for "
                                           "the following steps and at run time."},
        "env_flags": {
            "type": "object",
            "description": "With run: for a list or bool parameter, set NAME=1 for each selected item "
                           "({CHOICE} is the item in upper case) and another NAME=1 for each unselected one.",
            "additionalProperties": {
                "type": "object", "additionalProperties": False, "required": ["selected"],
                "properties": {"selected": {"type": "string"}, "unselected": {"type": "string"}},
            },
        },
        "apt": {**_string_list, "description": "Debian/Ubuntu packages installed with apt-get (downloaded packages "
                                               "and lists cleaned)."},
        "pip": {**_string_list, "description": "Python packages installed with pip (no cache)."},
        "env_from": {"type": "string", "description": "A list parameter of NAME=VALUE items: variables for the "
                                                     "following steps and at run time."},
        "label": {"type": "object", "additionalProperties": {"type": "string"},
                  "description": "Image labels (LABEL in the Dockerfile, %labels in the .def)."},
        "label_from": {"type": "string", "description": "A list parameter of KEY=VALUE items: image labels."},
        "copy": {
            "type": "array", "description": "Host files or folders copied into the image.",
            "items": {"type": "object", "additionalProperties": False, "required": ["src", "dest"],
                      "properties": {"src": {"type": "string", "description": "Host path; relative paths are "
                                                                                   "relative to the recipe folder."},
                                     "dest": {"type": "string", "description": "Absolute path in the image."}}},
        },
        "when": {"oneOf": [{"type": "string"}, _string_list],
                 "description": "Conditions that must all hold for this step: FLAG (a bool parameter is true), "
                                "!FLAG (false), or PARAM=VALUE (a string parameter equals VALUE)."},
        "comment": {"type": "string", "description": "Shown above the step in the rendered files."},
    },
}

_layer_common: dict[str, Any] = {
    "description": {"type": "string", "description": "One line shown by `ckit recipes`."},
    "parameters": {"type": "object", "propertyNames": {"pattern": PARAM_NAME},
                   "additionalProperties": PARAMETER, "description": "Typed parameters of this layer."},
    "provides": {**_string_list, "description": "Capabilities this layer adds (e.g. mpi, nccl, pytorch)."},
    "constraints": {"type": "array", "items": CONSTRAINT, "description": "Compatibility rules."},
}

BASE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["kind", "description", "image"],
    "properties": {
        "kind": {"const": "base", "description": "Always `base`: what this file is."},
        **_layer_common,
        "image": {"type": "string", "description": "Image reference; {param} expands. Must carry a tag or digest, "
                                                   "never latest."},
        "ngc": {"type": "boolean", "description": "An NGC image: --ngc RELEASE sets its release parameter."},
        "facts": {"type": "string", "description": "Fact table (recipes/facts/NAME.yaml) keyed by the release."},
        "paths": {"type": "object", "additionalProperties": {"type": "string"},
                  "description": "Well-known paths in the image (mpi_home, nccl_home…), usable as {base.NAME}."},
    },
}

ADDON = {
    "type": "object",
    "additionalProperties": False,
    "required": ["kind", "description", "steps"],
    "properties": {
        "kind": {"const": "addon", "description": "Always `addon`: what this file is."},
        **_layer_common,
        "requires": {**_string_list, "description": "Capabilities the base or an earlier add-on must provide."},
        "requires_params": {**_string_list, "description": "List parameters whose items must each be provided "
                                                            "(horovod: the frameworks it is built for)."},
        "steps": {"type": "array", "items": STEP, "description": "Build steps, in order."},
    },
}

STACK = {
    "type": "object",
    "additionalProperties": False,
    "required": ["kind", "description"],
    "properties": {
        "kind": {"const": "stack", "description": "Always `stack`: what this file is."},
        "description": {"type": "string", "description": "One line shown by `ckit recipes`."},
        "extends": {"type": "string", "pattern": NAME, "description": "Another stack this one builds on."},
        "base": {"type": "string", "pattern": NAME, "description": "Base layer (recipes/bases/NAME.yaml)."},
        "addons": {"type": "array", "items": {"type": "string", "pattern": ADDON_ENTRY},
                   "description": "Add-ons (recipes/addons/NAME.yaml), applied in order after the base and after "
                                  "those of the stack it extends. `NAME as ALIAS` adds one more copy of an add-on "
                                  "the stack already has (a second `files`); its parameters go under ALIAS."},
        "parameters": {"type": "object", "propertyNames": {"pattern": NAME},
                       "additionalProperties": {"type": "object"},
                       "description": "Parameter values per layer: LAYER: {PARAM: VALUE}."},
        "entrypoint": {**_string_list, "description": "Image ENTRYPOINT (and .def runscript), exec form."},
        "cmd": {**_string_list, "description": "Default arguments (CMD) when none are given."},
        "seed": {"type": "string", "description": "The cluster guide this stack reproduces."},
    },
}

FACTS = {
    "type": "object",
    "additionalProperties": False,
    "required": ["kind", "description", "key", "columns", "releases"],
    "properties": {
        "kind": {"const": "facts", "description": "Always `facts`: what this file is."},
        "description": {"type": "string", "description": "What the table covers."},
        "key": {"type": "string", "description": "The base parameter that selects a row (release)."},
        "columns": {**_string_list, "description": "Fact names, in display order."},
        "provides": {**_string_list, "description": "Capabilities every release of this image provides."},
        "sources": {**_string_list, "description": "Where the facts were read."},
        "releases": {
            "type": "object",
            "description": "One row per release: fact values, and the facts not verified against a source.",
            "additionalProperties": {
                "type": "object",
                "properties": {"unverified": {**_string_list, "description": "Facts not checked at a source."}},
                "additionalProperties": {"type": "string"},
            },
        },
    },
}

SCHEMAS = {"base": BASE, "addon": ADDON, "stack": STACK, "facts": FACTS}


FOLDERS = {"stack": "stacks", "base": "bases", "addon": "addons", "facts": "facts"}


def _table(schema: dict[str, Any]) -> list[str]:
    """One row per key, in schema order; required keys say so."""
    required = set(schema.get("required", ()))
    rows = ["| key | meaning |", "|---|---|"]
    for key, spec in schema["properties"].items():
        mark = " **(required)**" if key in required else ""
        rows.append(f"| `{key}`{mark} | {spec.get('description', '')} |")
    return rows


def reference_markdown() -> str:
    """The recipe file reference (a generated page of the docs site) from the schemas: every key, ``kind`` included."""
    lines: list[str] = []
    for kind in ("stack", "base", "addon", "facts"):
        lines += [f"**{kind}** files (`recipes/{FOLDERS[kind]}/NAME.yaml`):", "", *_table(SCHEMAS[kind]), ""]
    lines += ["**steps** (in add-ons), one action each:", "", *_table(STEP), ""]
    lines += ["**parameters** (in bases and add-ons):", "", *_table(PARAMETER)]
    return "\n".join(lines) + "\n"
