"""Every `ckit launch` command of the README's seed table runs as shown (no sbatch here: it writes the job)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from buildkit.cli import main

README = Path(__file__).parents[2] / "README.md"


def seed_table_commands() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Sites and jobs"):text.index("## Tests, real components")]
    rows = [line for line in section.splitlines() if re.match(r"^\| 00\d ", line)]
    return [cmd for row in rows for cmd in re.findall(r"`(ckit launch [^`]*)`", row.rsplit(" | ", 1)[-1])]


def test_the_table_has_every_guide():
    guides = {c.split("--site ")[1].split()[0] for c in seed_table_commands()}
    assert guides == {"twnia2", "neuron", "oci", "apulis", "tara"}


@pytest.mark.parametrize("command", seed_table_commands())
def test_seed_table_command_runs_as_shown(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-sbatch"))
    monkeypatch.setenv("USER", "user_name")
    argv = shlex.split(command)[1:]
    assert main(argv) == 0, capsys.readouterr().err
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written or "--site apulis" in command, command
