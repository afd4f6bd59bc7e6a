"""The one place that runs external commands.

Commands are argv lists, never ``shell=True``. Secrets passed in ``secrets`` are replaced by ``***`` in
every message, log line and error this module produces. A non-zero exit raises
:class:`~buildkit.errors.CommandFailed` with the tail of stderr.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import CommandFailed, CommandTimeout, ConfigError, format_argv

log = logging.getLogger("ckit.process")

STDERR_TAIL_LINES = 25


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def which(name: str) -> str | None:
    return shutil.which(name)


def require(name: str, *, purpose: str, package: str | None = None) -> str:
    """Path of the program ``name`` or a ConfigError that says what to install."""
    path = shutil.which(name)
    if path is None:
        pkg = f" (Debian/Ubuntu: apt-get install {package})" if package else ""
        raise ConfigError(f"{name} is needed to {purpose} but was not found on PATH", hint=f"install {name}{pkg}")
    return path


def _tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def run(
    argv: Sequence[str],
    *,
    step: str | None = None,
    input: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    check: bool = True,
    secrets: Sequence[str] = (),
    timeout: float | None = None,
    unset: Sequence[str] = (),
) -> Result:
    """Run ``argv`` to completion, capturing output as text. ``env`` is added to this process's environment;
    the variables in ``unset`` are left out of it. After ``timeout`` seconds it is killed and
    :class:`~buildkit.errors.CommandTimeout` raised (the caller words what to check)."""
    argv = [os.fspath(a) for a in argv]
    log.debug("run: %s", redact(format_argv(argv), secrets))
    full_env = None if env is None and not unset else {
        name: value for name, value in {**os.environ, **(env or {})}.items() if name not in unset}
    data = input.encode() if isinstance(input, str) else input
    try:
        proc = subprocess.run(  # noqa: S603 - argv list, never a shell
            argv, input=data, capture_output=True, env=full_env, cwd=cwd, timeout=timeout, check=False
        )
    except FileNotFoundError as err:
        raise ConfigError(f"{argv[0]} was not found", hint=f"install {argv[0]} or put it on PATH") from err
    except subprocess.TimeoutExpired as err:  # subprocess.run killed it
        raise CommandTimeout([redact(a, secrets) for a in argv], err.timeout, step=step) from None
    if proc.returncode == -signal.SIGINT:  # Ctrl-C reached the whole process group: report it as such
        raise KeyboardInterrupt
    stdout = proc.stdout.decode(errors="replace")
    stderr = proc.stderr.decode(errors="replace")
    if check and proc.returncode != 0:
        raise CommandFailed(
            [redact(a, secrets) for a in argv], proc.returncode, redact(_tail(stderr or stdout), secrets), step=step
        )
    return Result(argv, proc.returncode, stdout, stderr)


@contextmanager
def stream_stdout(
    argv: Sequence[str],
    *,
    step: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    secrets: Sequence[str] = (),
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` with a binary stdout pipe; on exit of the block wait and check its status.

    stderr goes to a pipe read after the process ends (kept small by the tools we run).
    """
    yield from _popen(argv, step=step, env=env, cwd=cwd, secrets=secrets, stdout=subprocess.PIPE)


def _popen(argv: Sequence[str], *, step: str | None, env: Mapping[str, str] | None,
           cwd: str | os.PathLike[str] | None, secrets: Sequence[str], stdout: int) -> Iterator[subprocess.Popen[bytes]]:
    argv = [os.fspath(a) for a in argv]
    log.debug("start: %s", redact(format_argv(argv), secrets))
    full_env = None if env is None else {**os.environ, **env}
    with tempfile.TemporaryFile() as errfile:
        try:
            proc = subprocess.Popen(  # noqa: S603 - argv list, never a shell
                argv, stdout=stdout, stderr=errfile, env=full_env, cwd=cwd
            )
        except FileNotFoundError as err:
            raise ConfigError(f"{argv[0]} was not found", hint=f"install {argv[0]} or put it on PATH") from err
        ok = False
        try:
            yield proc
            ok = True
        finally:
            if not ok:
                proc.kill()
            if proc.stdout is not None:
                proc.stdout.close()
            returncode = proc.wait()
            if returncode == -signal.SIGINT:  # Ctrl-C reached the whole process group: report it as such
                raise KeyboardInterrupt
        if returncode != 0:
            errfile.seek(0)
            stderr = errfile.read().decode(errors="replace")
            raise CommandFailed(
                [redact(a, secrets) for a in argv], returncode, redact(_tail(stderr), secrets), step=step
            )


def interactive(argv: Sequence[str], *, cwd: str | os.PathLike[str] | None = None) -> int:
    """Run ``argv`` on this terminal (stdin, stdout and stderr inherited) and return its exit code."""
    log.debug("run (interactive) %s", format_argv(argv))
    try:
        return subprocess.run(list(argv), cwd=cwd, check=False).returncode
    except FileNotFoundError as err:
        raise ConfigError(f"{argv[0]}: not found", hint="install it or put it on PATH") from err
