"""Entry point of the ``ckit`` command: registers the commands and maps every error to one line and an exit code.

Importing this module is cheap (standard library only): the Typer app and the commands are imported inside
:func:`main`, so a Ctrl-C during start-up is an interruption like any other (exit 130, one line), never a
traceback. Errors: a :class:`~buildkit.errors.CkitError` prints its message and exits with its code; an OSError
that escaped the code that should have worded it (a lock file replaced by a folder, a full disk) prints the file
and the system's reason (exit 1); anything else is reported as an internal error in one line (exit 1). The
traceback is printed only with ``--debug``.
"""

from __future__ import annotations

import _signal  # the C module: ``signal`` imports enum, which alone takes longer than a quick Ctrl-C
import os
import sys

TYPE_CHECKING = False  # not typing's: that import alone costs more than a quick Ctrl-C may wait
if TYPE_CHECKING:  # typer loads inside main()
    import typer


def _interrupted_during_start_up(signum: int, frame: object) -> None:
    os.write(2, b"ckit: interrupted\n")
    os._exit(130)


if __name__ == "__main__" or os.path.basename(sys.argv[0] or "") == "ckit":  # the program, not an import by tests
    _signal.signal(_signal.SIGINT, _interrupted_during_start_up)


def _unraisable(info: object) -> None:
    """A Ctrl-C that lands in a callback Python cannot raise from (an import lock's weakref callback, a
    finaliser) would be printed as "Exception ignored … KeyboardInterrupt" and lost: raise it again instead."""
    if isinstance(getattr(info, "exc_value", None), KeyboardInterrupt):
        import _thread

        _thread.interrupt_main()
        return
    sys.__unraisablehook__(info)  # type: ignore[arg-type]


# Command modules in the order `ckit --help` lists them; importing one registers its commands on ``app``.
COMMAND_MODULES = ("recipes", "build", "convert", "inspect", "registry", "sites", "launch", "doctor", "jobs", "cache",
                   "config", "completion")


def _app() -> typer.Typer:
    import importlib

    from .commands.app import app

    for module in COMMAND_MODULES:
        importlib.import_module(f"{__package__}.commands.{module}")
    return app


def _say(message: str, *, error: bool = False) -> None:
    """One line on stderr: through the CLI's console when it is loaded (colour on a terminal), else plain. An
    error quotes what was typed or read (a job name, a path, a registry's answer): shown escaped."""
    from .outside import shown

    message = shown(message, lines=True)
    app_module = sys.modules.get(f"{__package__}.commands.app")
    console = getattr(app_module, "stderr", None)
    if console is not None:
        console.print(message, markup=False, style="red" if error else None)
    else:
        sys.stderr.write(message + "\n")


def main(argv: list[str] | None = None) -> int:
    """Run ckit; return the exit code (usage errors 2, CkitError subclasses their own code)."""
    args = argv if argv is not None else sys.argv[1:]
    previous = sys.unraisablehook
    try:
        app = _app()
        sys.unraisablehook = _unraisable
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # from here on Ctrl-C is KeyboardInterrupt
        app(args=args, prog_name="ckit", standalone_mode=True)
    except SystemExit as done:
        if _caused_by_interrupt(done):  # typer turns Ctrl-C into a silent exit 130
            _say("ckit: interrupted")
            return 130
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        _say("ckit: interrupted")
        return 130
    except Exception as err:  # noqa: BLE001 - the one place that turns any error into one line
        return _report(err, debug="--debug" in args)
    finally:
        sys.unraisablehook = previous
    return 0


def _report(err: Exception, *, debug: bool) -> int:
    """One line for ``err`` (its traceback too with --debug); the exit code."""
    from .errors import CkitError, os_error

    if debug:
        import traceback

        traceback.print_exc()
    if isinstance(err, CkitError):
        app_module = sys.modules.get(f"{__package__}.commands.app")  # loaded: the hints repeat its folders
        _say(f"ckit: error: {getattr(app_module, 'pasteable', str)(str(err))}", error=True)
        return err.exit_code
    if isinstance(err, OSError):
        _say(f"ckit: error: {os_error(err, action='read or write')}", error=True)
    elif isinstance(err, MemoryError):
        _say("ckit: error: out of memory", error=True)
    else:
        _say(f"ckit: internal error: {err.__class__.__name__}: {str(err)[:200]}\n  hint: this is a bug in ckit; "
             "run again with --debug for the traceback and report it", error=True)
    return 1


def _caused_by_interrupt(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def run() -> None:
    """Console-script entry point."""
    try:
        code = main()
    except KeyboardInterrupt:  # between main's handlers and here
        code = 130
    from .errors import exit_status

    sys.exit(exit_status(code))


if __name__ == "__main__":
    run()
