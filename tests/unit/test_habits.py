"""The habits users bring from docker, apptainer and Slurm: global options anywhere, aliases, refusals in
ckit's own words, and hints that work when pasted back."""

from __future__ import annotations

import pytest
import typer.main

from buildkit.cli import main
from buildkit.commands.app import app
from buildkit.commands.flags import hoist_global_flags


def _group():  # type: ignore[no-untyped-def]
    from buildkit.cli import _app

    return typer.main.get_command(_app())


@pytest.mark.parametrize(("argv", "hoisted"), [
    (["show", "demo", "--recipes", "r"], ["--recipes", "r", "show", "demo"]),
    (["show", "demo", "--recipes=r", "-q"], ["--recipes=r", "-q", "show", "demo"]),
    (["sites", "show", "x", "--sites", "s", "--sites", "t"], ["--sites", "s", "--sites", "t", "sites", "show", "x"]),
    (["--sites", "s", "launch", "--recipes", "r", "--site", "x"],
     ["--sites", "s", "--recipes", "r", "launch", "--site", "x"]),
    # the job's own command line: after --, and after the program's first word (launch takes the rest as its own)
    (["launch", "--site", "x", "--", "python", "--recipes", "r"],
     ["launch", "--site", "x", "--", "python", "--recipes", "r"]),
    (["launch", "--site", "x", "python", "t.py", "--debug", "--sites", "s"],
     ["launch", "--site", "x", "python", "t.py", "--debug", "--sites", "s"]),
    (["launch", "--name", "--recipes", "--site", "x"], ["launch", "--name", "--recipes", "--site", "x"]),
])
def test_global_options_with_values_anywhere(argv: list[str], hoisted: list[str]) -> None:
    assert app is not None
    assert hoist_global_flags(argv, _group()) == hoisted


def test_recipes_after_the_command_reaches_it(tmp_path, capsys) -> None:
    # before: "No such option: --recipes" (exit 2)
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "mine.yaml").write_text((_builtin("stacks/demo.yaml")).replace("demo", "mine", 1))
    assert main(["show", "mine", "--recipes", str(tmp_path), "--json"]) == 0
    assert '"mine"' in capsys.readouterr().out


def test_debug_in_the_program_line_stays_there(capsys) -> None:
    # before: --debug after the program's first word was taken as ckit's own and left out of the job
    assert main(["launch", "--site", "local", "--dry-run", "python", "x.py", "--debug"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("python x.py --debug")


def _builtin(relative: str) -> str:
    from buildkit.config.searchpath import builtin_dir

    return (builtin_dir("recipes") / relative).read_text()


def _error(argv: list[str], capsys) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """The error and hint lines ckit prints for ``argv`` (a usage error: exit 2, nothing on stdout)."""
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 2, captured.err
    assert lines[0].startswith("ckit: error: ") and lines[1].startswith("  hint: "), captured.err
    return lines[0], lines[1]


def _pasted(hint: str) -> list[str]:
    """The command a hint says to run, as the words a shell would pass."""
    import re
    import shlex

    found = re.search(r"`(ckit [^`]*)`", hint)
    assert found, hint
    return shlex.split(found[1])[1:]


@pytest.mark.parametrize(("argv", "error", "fixed"), [
    # Slurm, docker and apptainer habits: refused in ckit's words, the line translated
    (["launch", "--site", "oci", "--nv", "--dry-run", "--", "x"], "--nv is not an option of ckit",
     ["launch", "--site", "oci", "--dry-run", "--", "x"]),
    (["launch", "--site", "oci", "-N", "2", "--gpus", "8", "--dry-run", "--", "x"], "whole job's",
     ["launch", "--site", "oci", "-N", "2", "--gpus-per-node", "4", "--dry-run", "--", "x"]),
    (["launch", "--site", "oci", "--gpus=all", "--dry-run", "--", "x"], "partition's GPUs",
     ["launch", "--site", "oci", "--dry-run", "--", "x"]),
    (["shell", "--site", "oci", "--image", "/x.sqsh", "--gres", "gpu:a100:2", "--dry-run"], "--gres",
     ["shell", "--site", "oci", "--image", "/x.sqsh", "--gpus-per-node", "2", "--dry-run"]),
    (["launch", "--site", "local", "-N", "2", "--partition", "multi", "-n", "4", "--dry-run", "--", "x"], "-n ",
     ["launch", "--site", "local", "-N", "2", "--partition", "multi", "--tasks-per-node", "2", "--dry-run", "--",
      "x"]),
    (["launch", "--site", "oci", "--framework", "horovod", "--gloo-interface", "eth0", "--dry-run", "--", "x"],
     "--network-interface", ["launch", "--site", "oci", "--framework", "horovod", "--gloo", "--network-interface",
                             "eth0", "--dry-run", "--", "x"]),
    (["launch", "--site", "oci", "--container-image", "/x.sqsh", "--container-mounts", "/a:/b,/c:/d", "--dry-run",
      "--", "x"], "--image", ["launch", "--site", "oci", "--image", "/x.sqsh", "--container-mounts", "/a:/b,/c:/d",
                              "--dry-run", "--", "x"]),
    (["launch", "--site", "oci", "--image", "/x.sqsh", "-v", "/a:/b", "--dry-run", "--", "x"], "--mount",
     ["launch", "--site", "oci", "--image", "/x.sqsh", "--mount", "/a:/b", "--dry-run", "--", "x"]),
    # typos: did you mean, with the line corrected (globals anywhere kept where they were)
    (["launch", "--sit", "oci", "--dry-run", "--", "x"], "no such option --sit",
     ["launch", "--site", "oci", "--dry-run", "--", "x"]),
    (["recipes", "--al", "--json", "-q"], "no such option --al", ["recipes", "--all", "--json", "-q"]),
    (["buidl", "demo", "--dry-run"], "no such command 'buidl'", ["build", "demo", "--dry-run"]),
    (["sites", "shwo", "oci"], "no such command 'shwo'", ["sites", "show", "oci"]),
    (["show", "demo", "--ngcc=24.06"], "no such option --ngcc", ["show", "demo", "--ngc=24.06"]),
])
def test_a_habit_or_typo_gets_a_line_that_works(argv, error, fixed, capsys, tmp_path, monkeypatch) -> None:
    # before: click's "No such option: --nv (Possible options: --env, --name, --venv)", or no suggestion
    monkeypatch.chdir(tmp_path)
    message, hint = _error(argv, capsys)
    assert error in message
    assert _pasted(hint) == fixed
    assert main(fixed) != 2 or "no such" not in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "error"), [
    (["launch", "--xyzzy"], "ckit launch: no such option --xyzzy"),
    (["--bogus", "recipes"], "ckit: no such option --bogus"),
    (["sites", "show"], "ckit sites show: missing argument 'SITE'"),
    (["launch", "--site", "local", "-N", "abc"], "ckit launch: invalid value for '-N' / '--nodes'"),
    (["render", "demo", "-f", "xx"], "ckit render: invalid value for --format"),
    (["build", "demo", "--nv"], "ckit build: no such option --nv"),  # a habit only where it means something
])
def test_other_usage_errors_in_ckit_words(argv, error, capsys) -> None:
    message, hint = _error(argv, capsys)
    assert message.startswith(f"ckit: error: {error}")
    assert main(_pasted(hint)) == 0  # the command's --help
    assert "Usage:" in capsys.readouterr().out


def test_aliases_of_habits(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["build", "demo", "-t", "x/y:1", "--engine", "docker", "--dry-run"]) == 0
    assert "build x/y:1" in capsys.readouterr().out
    for flag in ("--bind", "-B"):
        assert main(["launch", "--site", "oci", "--image", "/x.sqsh", flag, "/a:/b", "--dry-run", "--", "x"]) == 0
        assert ",/a:/b," in capsys.readouterr().out
        assert main(["shell", "--site", "oci", "--image", "/x.sqsh", flag, "/a:/b", "--dry-run"]) == 0
        assert "/a:/b" in capsys.readouterr().out


def test_a_hint_repeats_the_folders_given_on_the_line(tmp_path, capsys, monkeypatch) -> None:
    # before: "run `ckit lock mine` first", which cannot find the stack mine when pasted
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "mine.yaml").write_text(_builtin("stacks/demo.yaml").replace("demo", "mine", 1))
    monkeypatch.chdir(tmp_path)
    assert main(["build", "mine", "--locked", "--dry-run", "--recipes", str(tmp_path)]) == 2
    hint = capsys.readouterr().err.splitlines()[-1]
    assert hint == f"  hint: run `ckit --recipes {tmp_path} lock mine` first"
    assert main(["render", "mine", "--recipes", str(tmp_path)]) == 0
    note = capsys.readouterr().err
    assert f"`ckit --recipes {tmp_path} render mine -o DIR/`" in note
    assert main(_pasted(note)) == 0 and (tmp_path / "DIR" / "Dockerfile").is_file()
