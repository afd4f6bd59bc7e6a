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
