"""The examples of docs/jobs.md ("Examples: one per framework and runtime") run as shown: each `ckit launch` block
with `--dry-run`, the profile the page writes for its own cluster included, and every framework and runtime
`ckit backends` lists has one."""

from __future__ import annotations

import re
import shlex

import pytest

from buildkit.cli import main
from buildkit.launch.frameworks import REGISTRY as FRAMEWORKS
from buildkit.launch.runtimes import REGISTRY as RUNTIMES
from tests import doctext

SECTION = doctext.between("\n## Examples: one per framework and runtime", "\n## `ckit launch`")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", SECTION, re.DOTALL)


def commands() -> list[str]:
    return [block.replace("\\\n", " ").strip() for block in blocks("shell")]


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[0] == "ckit" and "launch" in words, command
    return words[1:]


def _named(command: str, flag: str, default: str) -> str:
    words = shlex.split(command.split(" -- ")[0])
    return words[words.index(flag) + 1] if flag in words else default


@pytest.mark.parametrize("command", commands())
def test_the_example_runs_as_shown(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-sbatch"))
    monkeypatch.setenv("USER", "me")
    (profile,) = blocks("yaml")
    (tmp_path / "mysites").mkdir()
    (tmp_path / "mysites" / "mycluster.yaml").write_text(profile)
    argv = _argv(command)
    at = argv.index("launch") + 1
    assert main([*argv[:at], "--dry-run", *argv[at:]]) == 0, capsys.readouterr().err
    assert "srun" in capsys.readouterr().out or "--site apulis" in command


def test_every_framework_and_runtime_has_an_example():
    shown = commands()
    frameworks = {_named(c, "--framework", "none") for c in shown}
    assert frameworks == set(FRAMEWORKS.names())
    headed = set(re.findall(r"^\*\*`([a-z-]+)`\*\*", SECTION.split("### By runtime")[1], re.MULTILINE))
    assert headed == set(RUNTIMES.names())
    by_runtime = SECTION.split("### By runtime")[1]
    assert {_named(c, "--runtime", "") for c in commands()} >= {"charliecloud", "podman", "none"}
    assert "--site oci" in by_runtime and "--site mycluster" in by_runtime  # pyxis, apptainer by their site
