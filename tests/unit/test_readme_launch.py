"""Every `ckit launch` command of the README's seed table runs as shown (no sbatch here: it writes the job)."""

from __future__ import annotations

import re
import shlex

import pytest

from buildkit.cli import main
from tests import doctext


def seed_rows() -> list[str]:
    section = doctext.between("| guide | by hand | with ckit |", "\n\n")
    return [line for line in section.splitlines() if re.match(r"^\| 00\d ", line)]


def seed_table_commands() -> list[str]:
    return [cmd for row in seed_rows() for cmd in re.findall(r"`(ckit launch [^`]*)`", row.rsplit(" | ", 1)[-1])]


def test_the_table_has_every_guide():
    guides = {c.split("--site ")[1].split()[0] for c in seed_table_commands()}
    assert guides == {"twnia2", "neuron", "oci", "apulis", "tara"}


@pytest.mark.parametrize("command", seed_table_commands())
def test_seed_table_command_runs_as_shown(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-sbatch"))
    monkeypatch.setenv("USER", "user_name")
    argv = shlex.split(command)[1:]
    interactive = "--interactive" in argv  # an allocation: here it only prints what it would run
    assert main([*argv, *(["--dry-run"] if interactive else [])]) == 0, capsys.readouterr().err
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written or "--site apulis" in command or interactive, command


def test_the_log_the_table_reads_is_the_one_ckit_writes():
    """``ckit nccl-report NAME-JOB.out`` names the default log of the row's ``-J NAME`` (NAME-%j.out)."""
    for row in seed_rows():
        for report in re.findall(r"ckit nccl-report (\S+)-JOB\.out", row):
            (launch,) = [c for c in re.findall(r"`(ckit launch [^`]*)`", row) if "nccl-tests" in c]
            argv = shlex.split(launch)
            assert argv[argv.index("-J") + 1] == report and "-o" not in argv, row
