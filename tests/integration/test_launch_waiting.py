"""Waiting on the real Slurm: ``launch --submit --wait`` shows the job's state and streams its output while the job
runs, ``cancel`` of a job Slurm does not know is an error, and a controller that does not answer is named within
CKIT_SLURM_TIMEOUT instead of a silent minute."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from buildkit.launch.words import literal


def _ckit(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, **(env or {})})


def test_wait_shows_the_state_and_streams_the_output_while_the_job_runs(slurm, tmp_path):
    """The job prints a line, then waits for a file that the test writes only once ckit has shown that line:
    without streaming, the job would never end."""
    job = literal('echo first; while [ ! -e go ]; do sleep 0.2; done; echo second; echo oops >&2; exit 3')
    proc = subprocess.Popen([sys.executable, "-m", "buildkit.cli", "launch", "--site", "local", "-J", "streamed",
                             "--submit", "--wait", "--", "sh", "-c", job], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    shown, deadline = b"", time.monotonic() + 90
    try:
        while b"first\n" not in shown:
            assert time.monotonic() < deadline and proc.poll() is None, shown
            if select.select([proc.stdout], [], [], 0.5)[0]:
                shown += os.read(proc.stdout.fileno(), 4096)
        assert shown == b"first\n"
        (tmp_path / "go").touch()
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    text = err.decode()
    assert proc.returncode == 3, text
    job_id = re.search(r"submitted job ([0-9]+)", text).group(1)
    log = (tmp_path / f"streamed-{job_id}.out").read_bytes()
    assert shown + out == log and log.startswith(b"first\nsecond\n") and b"oops\n" in log  # the log, not the id
    states = re.findall(rf"^job {job_id}: ([A-Z]+)$", text, re.M)
    assert "RUNNING" in states and states[-1] == "FAILED" and len(states) == len(set(states)), text
    assert f"job {job_id} finished with exit code 3" in text


def test_cancel_of_a_job_slurm_does_not_know_is_an_error(slurm, tmp_path):
    done = _ckit("cancel", "99999", cwd=tmp_path)
    assert done.returncode == 1 and "job 99999: the Slurm controller does not know it" in done.stderr
    assert "cancelled" not in done.stderr.replace("nothing was cancelled", "")


def test_a_controller_that_does_not_answer_is_named_within_the_timeout(slurm, tmp_path):
    """A slurm.conf whose controller address nobody answers: squeue would retry for a minute without a word."""
    conf = Path(os.environ["SLURM_CONF"]).read_text()
    wrong = tmp_path / "slurm.conf"
    wrong.write_text(re.sub(r"^SlurmctldHost=.*$", "SlurmctldHost=nohost(10.233.0.250)", conf, flags=re.M))
    done = _ckit("jobs", cwd=tmp_path, env={"SLURM_CONF": str(wrong), "CKIT_SLURM_TIMEOUT": "3"})
    assert done.returncode == 1, done.stderr
    assert "squeue did not answer within 3 s (list the jobs)" in done.stderr
    assert f"SLURM_CONF={wrong}" in done.stderr and "slurmctld" in done.stderr
    done = _ckit("jobs", cwd=tmp_path, env={"SLURM_CONF": str(tmp_path / "none.conf")})
    assert done.returncode == 2 and "none.conf names no file" in done.stderr
