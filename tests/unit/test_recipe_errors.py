"""Bad input: one message naming file, key path and line, with a hint; exit 2 (3 for impossible stacks)."""

from __future__ import annotations

import contextlib
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildkit.cli import main
from buildkit.errors import CkitError, CompatError, ConfigError
from buildkit.recipe.catalog import Catalog


def _write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_misspelled_parameter_in_user_stack(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, "stacks/mine.yaml", """\
        kind: stack
        description: my horovod
        extends: pytorch-horovod
        parameters:
          horovod:
            verison: 0.20.3
        """)
    code = main(["--recipes", str(tmp_path), "render", "mine", "--format", "docker"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{path}:6" in err and "verison" in err and "did you mean 'version'" in err
    assert "Traceback" not in err


def test_misspelled_schema_key_in_user_addon(tmp_path: Path) -> None:
    path = _write(tmp_path, "addons/tool.yaml", """\
        kind: addon
        description: a tool
        steps:
          - rn: echo hi
        """)
    _write(tmp_path, "stacks/s.yaml", "kind: stack\ndescription: s\nbase: debian\naddons: [tool]\n")
    with pytest.raises(ConfigError) as err:
        Catalog.from_dirs([tmp_path]).resolve("s")
    assert f"{path}:4" in str(err.value) and "unknown key 'rn'" in str(err.value)
    assert err.value.hint == "did you mean 'run'?"


def test_wrong_type(tmp_path: Path) -> None:
    path = _write(tmp_path, "stacks/s.yaml", """\
        kind: stack
        description: s
        base: debian
        addons: [horovod-check]
        entrypoint: python
        """)
    with pytest.raises(ConfigError) as err:
        Catalog.from_dirs([tmp_path]).resolve("s")
    assert f"{path}:5" in str(err.value) and "entrypoint" in str(err.value)


def test_missing_requirement_is_an_impossible_stack(tmp_path: Path) -> None:
    _write(tmp_path, "stacks/s.yaml", "kind: stack\ndescription: s\nbase: debian\naddons: [horovod]\n")
    with pytest.raises(CompatError) as err:
        Catalog.from_dirs([tmp_path]).resolve("s")
    assert "requires mpi, nccl, cuda, pip" in str(err.value)


def test_conflict_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path, "stacks/s.yaml", "kind: stack\ndescription: s\nbase: apulis-horovod\naddons: [horovod]\n")
    with pytest.raises(CompatError, match="provides horovod, which the stack already has"):
        Catalog.from_dirs([tmp_path]).resolve("s")


@pytest.mark.parametrize(("args", "code", "words"), [
    (["show", "pytorch-hrovod"], 2, "did you mean 'pytorch-horovod'"),
    (["show", "pytorch-horovod", "--set", "horovod"], 2, "expected LAYER.PARAM=VALUE"),
    (["show", "pytorch-horovod", "--set", "horovd.version=1.0.0"], 2, "did you mean 'horovod'"),
    (["show", "pytorch-horovod", "--set", "horovod.check_build=maybe"], 2, "expects true or false"),
    (["show", "pytorch-horovod", "--set", "horovod.gpu_operations=NCLL"], 2, "did you mean 'NCCL'"),
    (["show", "pytorch-horovod", "--ngc", "24.06"], 3, "C++17"),
    (["show", "pytorch-horovod", "--ngc", "22.11", "--set", "horovod.version=0.23.0"], 3, "THC"),
    (["show", "tensorflow-horovod", "--ngc", "24.06", "--set", "ngc-tensorflow.variant=tf1"], 3, "end at 23.03"),
    (["show", "demo", "--ngc", "24.06"], 2, "not an NGC image"),
])
def test_cli_errors(args: list[str], code: int, words: str, capsys) -> None:
    assert main(args) == code
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_user_folder_overrides_builtin(tmp_path: Path, monkeypatch, capsys) -> None:
    _write(tmp_path, "stacks/demo.yaml", "kind: stack\ndescription: my own demo\nbase: ubuntu\n")
    monkeypatch.setenv("CKIT_RECIPES_PATH", str(tmp_path))
    assert main(["show", "demo", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"description": "my own demo"' in out and "ubuntu:22.04" in out


def test_recipes_folder_must_exist(tmp_path: Path, capsys) -> None:
    assert main(["--recipes", str(tmp_path / "nope"), "recipes"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_extends_loop(tmp_path: Path) -> None:
    _write(tmp_path, "stacks/a.yaml", "kind: stack\ndescription: a\nextends: b\n")
    _write(tmp_path, "stacks/b.yaml", "kind: stack\ndescription: b\nextends: a\n")
    with pytest.raises(ConfigError, match="extends itself"):
        Catalog.from_dirs([tmp_path]).resolve("a")


def test_hostile_values_are_quoted_or_rejected(tmp_path: Path) -> None:
    from buildkit.render import dockerfile

    catalog = Catalog.from_dirs()
    recipe = catalog.resolve("demo", sets=["labels.values=a=$(touch /x)"])
    assert '\\$(touch /x)' in dockerfile.render(recipe)
    with pytest.raises(ConfigError, match="may not contain"):
        catalog.resolve("demo", sets=["env.vars=A=`id`"])
    with pytest.raises(ConfigError, match="may not contain"):
        catalog.resolve("demo", sets=["env.vars=A=$(id)"])


_yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
_keys = st.sampled_from(["kind", "description", "base", "addons", "parameters", "extends", "entrypoint", "cmd",
                         "seed", "verison", "steps"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.dictionaries(_keys, _yaml_values, max_size=6) | _yaml_values)
def test_parser_fuzz_never_tracebacks(doc, tmp_path_factory) -> None:
    import yaml

    root = tmp_path_factory.mktemp("fuzz")
    (root / "stacks").mkdir()
    (root / "stacks" / "f.yaml").write_text(yaml.safe_dump(doc))
    with contextlib.suppress(CkitError):
        Catalog.from_dirs([root]).resolve("f")


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=200))
def test_raw_text_fuzz_never_tracebacks(text: str, tmp_path_factory) -> None:
    root = tmp_path_factory.mktemp("raw")
    (root / "addons").mkdir()
    (root / "stacks").mkdir()
    (root / "addons" / "x.yaml").write_text(text)
    (root / "stacks" / "s.yaml").write_text("kind: stack\ndescription: s\nbase: debian\naddons: [x]\n")
    with contextlib.suppress(CkitError):
        Catalog.from_dirs([root]).resolve("s")


@settings(max_examples=150, deadline=None)
@given(value=st.text(max_size=30), layer=st.sampled_from(["horovod", "ngc-pytorch", "x"]),
       param=st.sampled_from(["version", "frameworks", "check_build", "release", "git_ref"]))
def test_set_fuzz_never_tracebacks(value: str, layer: str, param: str) -> None:
    with contextlib.suppress(CkitError):
        Catalog.from_dirs().resolve("pytorch-horovod", sets=[f"{layer}.{param}={value}"], ngc="22.11")
