"""``ckit logs`` of a job whose output is not a plain log, run through the real CLI: bounded in size and time.

A job's ``--output`` may be ``/dev/zero`` (which never ends: read whole, it ran until MemoryError), a FIFO (whose
read waited for ever) or a file of gigabytes. Only a regular file is read, opened without blocking and checked
before anything is read; of a long log, the last ``CKIT_MAX_LOG_TAIL`` bytes are shown, with a note naming the
file. The log is found through the controller (``scontrol``'s StdOut) or, once it forgot the job, as
``*-JOB.out`` in the current folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.adversary import clean_failure, run

FORGOTTEN = "4000000001"  # a job id the controller does not know: the log is the folder's *-JOB.out


def wait_done(job: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = subprocess.run(["scontrol", "show", "job", "--oneliner", job],  # noqa: S603, S607
                               capture_output=True, text=True, check=False).stdout
        if "JobState=COMPLETED" in state or "JobState=FAILED" in state:
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job} did not finish: {state}")


def test_a_job_whose_output_is_dev_zero(slurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(["sbatch", "--parsable", "-o", "/dev/zero", "--wrap", "echo lost"],  # noqa: S603, S607
                          capture_output=True, text=True, check=True, cwd=tmp_path)
    job = done.stdout.strip().split(";")[0]
    wait_done(job)
    for follow in ([], ["-f"], ["--json"]):
        ran = run("logs", job, *follow, cwd=tmp_path, timeout=60)
        clean_failure(ran, 1, says=f"job {job}: its log: /dev/zero is a character device, not a regular file")
        assert ran.seconds < 30


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
def test_a_log_that_is_a_fifo_or_a_link_to_a_device_is_refused_at_once(slurm, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                       kind: str) -> None:
    log = tmp_path / f"train-{FORGOTTEN}.out"
    if kind == "fifo":
        os.mkfifo(log)  # read, it waits for a writer for ever; opened without O_NONBLOCK, so does the open
    else:
        log.symlink_to("/dev/zero")
    for follow in ([], ["-f"]):
        ran = run("logs", FORGOTTEN, *follow, cwd=tmp_path, timeout=60)
        clean_failure(ran, 1, says="not a regular file")
        assert ran.seconds < 30


def test_a_long_log_shows_its_tail_with_a_note(slurm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / f"train-{FORGOTTEN}.out"
    data = b"".join(b"line %07d\n" % n for n in range(300_000))  # 3.6 MB
    log.write_bytes(data)
    tail = 64 << 10
    for follow in ([], ["-f"]):
        ran = run("logs", FORGOTTEN, *follow, cwd=tmp_path, timeout=60, env={"CKIT_MAX_LOG_TAIL": str(tail)})
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout == data[-tail:].decode()
        assert f"{len(data) - tail} bytes of the log left out" in ran.stderr and str(log) in ran.stderr
    shown = json.loads(run("logs", FORGOTTEN, "--json", cwd=tmp_path, env={"CKIT_MAX_LOG_TAIL": str(tail)}).stdout)
    assert shown["text"] == data[-tail:].decode() and shown["skipped_bytes"] == len(data) - tail
    log.write_bytes(data[:1000])
    whole = run("logs", FORGOTTEN, cwd=tmp_path, timeout=60)  # the default tail (1 MiB) holds all of a short log
    assert whole.stdout == data[:1000].decode() and "left out" not in whole.stderr
