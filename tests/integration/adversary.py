"""Running ckit against hostile input: exit code, output, wall time and peak memory of one real process.

:func:`run` starts ``python -m buildkit.cli`` (as a user's ``ckit`` would run), with an address-space limit as a
safety net, waits for it with ``wait4`` to learn its peak resident memory, and kills it at ``timeout``.
:func:`clean_failure` is what every hostile case asserts: one of the expected exit codes, one clear error line,
never a traceback or an internal error.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MEMORY_CEILING = 300 << 20  # bytes of peak RSS a hostile input may cost ckit
ADDRESS_SPACE = 4 << 30  # the child's RLIMIT_AS: a runaway allocation fails fast instead of eating the machine


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    max_rss: int  # bytes
    timed_out: bool


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120,
        stdin: str | None = None) -> Ran:
    """``ckit ARGS…`` in a child process; its exit code, output, duration and peak RSS."""
    return spawn([sys.executable, "-m", "buildkit.cli", *args], env=env, cwd=cwd, timeout=timeout, stdin=stdin)


def spawn(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120,
          stdin: str | None = None) -> Ran:
    """``argv`` in a child process under the address-space limit; its exit code, output, duration, peak RSS."""
    full_env = {**os.environ, **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=err,  # noqa: S603
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                env=full_env, cwd=cwd or tempfile.gettempdir(), preexec_fn=_limit)
        if stdin is not None:
            assert proc.stdin is not None
            proc.stdin.write(stdin.encode())
            proc.stdin.close()
        status, usage, timed_out = _wait(proc, timeout)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        code = os.waitstatus_to_exitcode(status)
        return Ran(code, out.read().decode(errors="replace"), err.read().decode(errors="replace"), seconds,
                   usage.ru_maxrss * 1024, timed_out)


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, resource.struct_rusage, bool]:
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return status, usage, False
        if time.monotonic() > deadline:
            proc.send_signal(signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return status, usage, True
        time.sleep(0.02)


def clean_failure(ran: Ran, *codes: int, says: str) -> None:
    """The run failed the way a user should see it: an expected code, a one-line error that says ``says``
    (every caller names what the user must read), nothing else."""
    assert not ran.timed_out, f"ckit did not finish in time (killed after {ran.seconds:.0f} s): {ran.stderr[-2000:]}"
    assert ran.returncode in codes, f"exit {ran.returncode}, expected {codes}: {ran.stderr[-2000:]}"
    assert "Traceback" not in ran.stderr and "internal error" not in ran.stderr, ran.stderr[-3000:]
    assert "ckit: error:" in ran.stderr or ran.returncode == 130, ran.stderr[-2000:]
    assert says in ran.stderr, f"{says!r} not in: {ran.stderr[-2000:]}"
    assert ran.max_rss < MEMORY_CEILING, f"peak memory {ran.max_rss >> 20} MiB"


def no_leftovers(folder: Path) -> list[str]:
    """Temporary or partial files under ``folder`` (what an interrupted or failed write must not leave)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.name.endswith((".part", ".tmp")) or p.name.startswith("."))
