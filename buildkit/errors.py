"""One error root with an exit code per class (see docs: CLI exit codes).

Every error a user can meet derives from :class:`CkitError`. The CLI catches only this root, prints
one message (plus ``hint`` when there is one) and exits with ``exit_code``; a traceback is shown only
with ``--debug``.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence

from .outside import shown


class CkitError(Exception):
    """Root of every error ckit reports to a user."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(CkitError):
    """Bad input: usage, recipe, site, parameter. Nothing was changed."""

    exit_code = 2


class PolicyError(ConfigError):
    """A request breaks a site rule. Nothing was written or submitted."""


class CompatError(CkitError):
    """An impossible stack combination, caught before anything is built."""

    exit_code = 3


class IntegrityError(CkitError):
    """A digest or signature did not match. Nothing was written."""

    exit_code = 4


class BuildError(CkitError):
    """An engine build failed."""


class ConvertError(CkitError):
    """An image could not be converted."""


class RegistryError(CkitError):
    """A registry operation failed. ``unreachable``: no answer came (no connection, none within the deadline,
    one that broke off), as opposed to an answer that refused; the registry client says which where it raises."""

    def __init__(self, message: str, *, hint: str | None = None, unreachable: bool = False) -> None:
        super().__init__(message, hint=hint)
        self.unreachable = unreachable


class LaunchError(CkitError):
    """A job could not be written or submitted."""


class JobTimeout(LaunchError):
    """A wait for a job ended before the job did (the job goes on)."""


class Interrupted(CkitError):
    """The user interrupted the operation; nothing half-written was left behind."""

    exit_code = 130


def exit_status(code: int) -> int:
    """``code``, made to stand when it is a handled Ctrl-C's 130. CPython remembers a KeyboardInterrupt that left an
    ``exec`` or ``eval`` of a string (a dataclass made by a late import, typer reading the commands' annotations)
    and, even when the interrupt was handled, makes the interpreter kill itself with SIGINT at exit (its caller
    sees -2). Evaluating a string clears that record."""
    if code == Interrupted.exit_code:
        eval("None")  # noqa: S307 - a constant, nothing of the user's
    return code


class FileError(CkitError):
    """A file or folder could not be read or written (disk full, read-only, no permission, wrong kind)."""


_OS_HINTS = {
    errno.ENOSPC: "free some space, or write somewhere else (-o, CKIT_CACHE_DIR)",
    errno.EDQUOT: "your disk quota is used up: free some space, or write somewhere else",
    errno.EROFS: "the file system is mounted read-only: write somewhere else (-o, CKIT_CACHE_DIR)",
    errno.EACCES: "you may not write there: check the folder's permissions, or write somewhere else",
    errno.EPERM: "you may not change that file: check its owner and permissions",
    errno.ENAMETOOLONG: "use a shorter file name (at most 255 bytes) or path",
    errno.EISDIR: "a folder is where ckit expects a file: remove or rename it",
    errno.ENOTDIR: "a file is where ckit expects a folder: remove or rename it",
}


def os_error(err: OSError, path: object = None, action: str = "write") -> FileError:
    """One clear line for an OSError: the file it concerns, what the system said, and what to do."""
    name = err.filename if err.filename is not None else path
    where = f"{shown(name)}: " if name is not None else ""  # a file name may hold a newline
    reason = err.strerror or err.__class__.__name__
    return FileError(f"{where}cannot {action}: {reason}", hint=_OS_HINTS.get(err.errno or 0))


class CommandFailed(CkitError):
    """An external command exited non-zero. Carries the (redacted) argv, exit code and stderr tail."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr_tail: str, *, step: str | None = None) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        what = f"{step}: " if step else ""
        tail = f"\n{stderr_tail.rstrip()}" if stderr_tail.strip() else ""
        super().__init__(f"{what}command failed with exit code {returncode}: {format_argv(self.argv)}{tail}")


class CommandTimeout(CkitError):
    """An external command ran longer than its timeout and was stopped. Carries the (redacted) argv."""

    def __init__(self, argv: Sequence[str], timeout: float, *, step: str | None = None) -> None:
        self.argv, self.timeout = list(argv), timeout
        what = f"{step}: " if step else ""
        super().__init__(f"{what}no answer after {timeout:g} s, stopped: {format_argv(self.argv)}")


def format_argv(argv: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in argv)
