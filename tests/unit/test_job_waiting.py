"""Waiting on Slurm: a job's state changes and log while ``--wait`` waits, a Slurm command that does not answer,
and cancel of a job the controller does not know (Slurm's commands replaced by fakes)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from buildkit.errors import ConfigError, JobTimeout, LaunchError
from buildkit.launch import slurmctl
from buildkit.launch.jobcontrol import JobControl, JobEvent, JobStatus
from buildkit.launch.slurmjobs import SlurmJobControl
from buildkit.process import Result


class _Scripted(JobControl):
    """A job whose state moves on at each look, writing its log as it runs."""

    name = "scripted"

    def __init__(self, log: Path, states: list[str]) -> None:
        self.log, self.states, self.looks = log, states, 0

    def status(self, job_id: str, records: Path | None = None) -> JobStatus:
        state = self.states[min(self.looks, len(self.states) - 1)]
        self.looks += 1
        if state == "RUNNING":
            with self.log.open("a") as out:
                out.write(f"line {self.looks}\n")
        active = state in ("PENDING", "RUNNING")
        return JobStatus(job_id, state, active, None if active else 0)


def test_watch_tells_each_state_change_once_then_the_whole_log(tmp_path: Path) -> None:
    log = tmp_path / "job-7.out"
    control = _Scripted(log, ["PENDING", "PENDING", "RUNNING", "RUNNING", "COMPLETED"])
    events: list[JobEvent] = []
    final = control.watch("7", [("output", log)], events.append, poll=0)
    assert final.state == "COMPLETED" and final.exit_code == 0
    assert [e.status.state for e in events if e.status] == ["PENDING", "RUNNING", "COMPLETED"]
    assert b"".join(e.piece.data for e in events if e.piece) == b"line 3\nline 4\n" == log.read_bytes()
    order = ["state" if e.status else "log" for e in events]
    assert order.index("log") > 1 and order[-1] == "state"  # the log came while it ran


def test_wait_with_a_timeout_raises_and_the_job_goes_on(tmp_path: Path) -> None:
    control = _Scripted(tmp_path / "never.out", ["PENDING"])
    with pytest.raises(JobTimeout, match="job 8 is still PENDING after 0 s") as err:
        control.wait("8", timeout=0, poll=0)
    assert "ckit cancel 8" in (err.value.hint or "")


@pytest.fixture
def slurm_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=fake\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: f"/usr/bin/{name}")
    return conf


def test_a_slurm_command_that_does_not_answer_is_stopped_and_named(monkeypatch, slurm_here) -> None:
    """squeue retries an unreachable controller for a minute without a word: ckit stops it at
    CKIT_SLURM_TIMEOUT and names SLURM_CONF and slurmctld."""
    asked: list[float] = []

    def hangs(argv: list[str], **kwargs: object) -> None:
        asked.append(float(kwargs["timeout"]))  # type: ignore[arg-type]
        raise subprocess.TimeoutExpired(argv, float(kwargs["timeout"]))  # type: ignore[arg-type]

    monkeypatch.setattr(subprocess, "run", hangs)
    monkeypatch.setenv("CKIT_SLURM_TIMEOUT", "2.5")
    with pytest.raises(LaunchError) as err:
        slurmctl.jobs("me")
    assert asked == [2.5]
    assert "squeue did not answer within 2.5 s (list the jobs)" in str(err.value)
    assert f"SLURM_CONF={slurm_here}" in str(err.value) and "slurmctld" in (err.value.hint or "")


def test_a_slurm_conf_that_names_no_file_is_bad_input_at_once(monkeypatch, slurm_here, tmp_path) -> None:
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing.conf"))
    with pytest.raises(ConfigError, match="SLURM_CONF=.*missing.conf names no file"):
        SlurmJobControl().status("12")


def _answers(monkeypatch: pytest.MonkeyPatch, table: dict[str, Result]) -> list[list[str]]:
    ran: list[list[str]] = []

    def fake(argv: list[str], step: str, **kwargs: object) -> Result:
        ran.append(argv)
        return table[argv[0]]

    monkeypatch.setattr(slurmctl, "slurm_run", fake)
    return ran


def test_cancel_of_a_job_slurm_does_not_know_is_an_error(monkeypatch) -> None:
    unknown = Result([], 1, "", "slurm_load_jobs error: Invalid job id specified\n")
    ran = _answers(monkeypatch, {"scontrol": unknown, "scancel": Result([], 0, "", "")})
    with pytest.raises(LaunchError, match="job 99999: the Slurm controller does not know it, nothing was cancelled"):
        SlurmJobControl().cancel("99999")
    assert [argv[0] for argv in ran] == ["scontrol"]  # scancel never ran


def test_cancel_of_an_ended_job_cancels_nothing(monkeypatch) -> None:
    ran = _answers(monkeypatch, {"scontrol": Result([], 0, "JobId=5 JobState=COMPLETED ExitCode=0:0\n", "")})
    result = SlurmJobControl().cancel("5")
    assert not result.cancelled and result.state == "COMPLETED" and [a[0] for a in ran] == ["scontrol"]


def test_an_error_scancel_prints_with_exit_0_is_an_error(monkeypatch) -> None:
    _answers(monkeypatch, {"scontrol": Result([], 0, "JobId=6 JobState=RUNNING\n", ""),
                           "scancel": Result([], 0, "", "scancel: error: Kill job error on job id 6: denied\n")})
    with pytest.raises(LaunchError, match="scancel could not cancel job 6: scancel: error: Kill job error"):
        SlurmJobControl().cancel("6")
