"""The user's defaults reach the job the real Slurm runs: SBATCH_ACCOUNT and the config file's account, and a
-p on the line over SBATCH_PARTITION (sbatch lets the variable override the script's #SBATCH line)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.process import run


def _submitted(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, str]:
    """Launch ``true`` on the local Slurm and wait; the job's fields as the controller has them."""
    capsys.readouterr()
    rc = main(["launch", "--site", "local", "--submit", "--wait", "--json", *args, "--", "true"])
    out = capsys.readouterr().out
    assert rc == 0, out
    job_id = json.loads(out)["job_id"]
    shown = run(["scontrol", "show", "job", "--oneliner", job_id]).stdout
    return dict(re.findall(r"(\w+)=(\S*)", shown))


def test_defaults_reach_the_submitted_job(slurm, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.toml"
    config.write_text('account = "from-file"\npartition = "batch"\n')
    monkeypatch.setenv("CKIT_CONFIG", str(config))
    job = _submitted(tmp_path, capsys, "--name", "file-defaults")
    assert (job["Account"], job["Partition"]) == ("from-file", "batch")
    monkeypatch.setenv("SBATCH_ACCOUNT", "from-env")
    job = _submitted(tmp_path, capsys, "--name", "env-defaults")
    assert (job["Account"], job["Partition"]) == ("from-env", "batch")
    # before: sbatch took SBATCH_PARTITION over the script's "#SBATCH --partition=debug" the flag wrote
    monkeypatch.setenv("SBATCH_PARTITION", "batch")
    job = _submitted(tmp_path, capsys, "--name", "flag-wins", "-p", "debug", "-A", "from-flag")
    assert (job["Account"], job["Partition"]) == ("from-flag", "debug")
