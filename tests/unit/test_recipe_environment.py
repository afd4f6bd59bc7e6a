"""The environment model: env steps compose as Docker's ENV does, and the composed values export in sh the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from buildkit.errors import ConfigError
from buildkit.recipe.environment import compose
from buildkit.recipe.model import Copy, Env, Run

BASE = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/base/lib", "HOME": "/root"}


def docker(steps: list[Env]) -> dict[str, str]:
    """What Docker's ENV instructions leave, on BASE: each value expanded against the variables before it."""
    env = dict(BASE)
    for step in steps:
        before = dict(env)
        for name, value in step.vars:
            env[name] = re.sub(r"\$\{?(\w+)\}?", lambda m, known=before: known.get(m[1], ""), value)
    return env


def sourced(composed: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """What ``export NAME="VALUE"`` lines, one a variable in the given order, leave on BASE (as sh runs them)."""
    env = dict(BASE)
    for name, value in composed:
        env[name] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m[1], ""), value)
    return env


def env(*pairs: str) -> Env:
    return Env(tuple(tuple(p.split("=", 1)) for p in pairs))  # type: ignore[misc]


CASES = {
    "prepends compose": [env("PATH=/opt/ckit-demo:$PATH"), env("VIRTUAL_ENV=/opt/venv", "PATH=/opt/venv/bin:$PATH")],
    "append and prepend": [env("PATH=$PATH:/opt/late/bin"), env("PATH=/opt/early/bin:${PATH}")],
    "a later set replaces": [env("LD_LIBRARY_PATH=/x:$LD_LIBRARY_PATH"), env("LD_LIBRARY_PATH=/only")],
    "one step reads the values before it": [env("A=1"), env("A=2", "B=$A")],
    "a recipe variable is read as the recipe set it": [env("VENV=/opt/venv"), env("PATH=$VENV/bin:$PATH"),
                                                      env("VENV=/elsewhere")],
    "a base value read before the recipe changes it": [env("OLD_PATH=$PATH"), env("PATH=/x:$PATH")],
    "read through another variable": [env("C=$PATH"), env("PATH=/x"), env("B=$C:/y")],
    "unset stays empty": [env("PYTHONPATH=/opt/py:$PYTHONPATH")],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_composed_values_exported_in_order_mean_what_the_steps_meant(name: str) -> None:
    steps = CASES[name]
    assert sourced(compose([Run(("true",)), *steps])) == docker(steps)


def test_the_readme_path_keeps_both_folders_before_the_base_path() -> None:
    composed = dict(compose(CASES["prepends compose"]))
    assert composed == {"PATH": "/opt/venv/bin:/opt/ckit-demo:$PATH", "VIRTUAL_ENV": "/opt/venv"}


def test_each_variable_once_in_first_set_order_unless_a_base_value_must_be_read_first() -> None:
    steps = [env("PATH=/x:$PATH"), env("B=1"), env("A=$LD_LIBRARY_PATH"), env("LD_LIBRARY_PATH=/l")]
    assert [name for name, _ in compose(steps)] == ["PATH", "B", "A", "LD_LIBRARY_PATH"]
    read_first = [env("C=$PATH"), env("PATH=/x"), env("B=$C")]  # B holds the base PATH: exported before PATH
    names = [name for name, _ in compose(read_first)]
    assert names.index("B") < names.index("PATH") and names.index("C") < names.index("PATH")


def test_variables_that_read_each_other_base_values_are_refused() -> None:
    with pytest.raises(ConfigError) as err:
        compose([env("A=$B", "B=$A")])
    assert "A, B refer to each other's base values" in err.value.message


def test_only_env_steps_count() -> None:
    steps = [Run(("true",), env=(("PATH", "/stubs:$PATH"),)), Copy(Path("/x"), "/x", "files/1-x"), env("A=1")]
    assert compose(steps) == (("A", "1"),)
