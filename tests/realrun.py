"""The line every run ends with: the real runtimes and services the integration tests ran, and where enroot, Pyxis
and SingularityCE, which are not on this machine, are checked instead.

A plugin of the root conftest, so that it runs on the process that prints the summary: under pytest-xdist that is
the controller, which collects nothing (the integration conftest, which records what ran, is loaded on the workers
only); each worker hands its record over when it finishes.
"""

from __future__ import annotations

import pytest

# what this test process ran for real (component names; tests/integration/conftest.py's ``running`` adds them)
USED: set[str] = set()
RUNTIMES = {"podman": "podman", "apptainer": "Apptainer 1.4.5", "charliecloud": "Charliecloud (ch-run, squashfuse)",
            "slurm": "Slurm 22.05", "registry": "the registry"}


def pytest_sessionfinish(session: pytest.Session) -> None:
    worker_output = getattr(session.config, "workeroutput", None)  # an xdist worker: tell the controller
    if worker_output is not None:
        worker_output["ckit_used"] = sorted(USED)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's, on the controller
def pytest_testnodedown(node: object, error: object) -> None:
    USED.update(getattr(node, "workeroutput", {}).get("ckit_used", ()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    ran = [label for name, label in RUNTIMES.items() if name in USED]
    if ran:
        terminalreporter.write_line(
            f"real runtimes and services run: {', '.join(ran)}; enroot, Pyxis and SingularityCE are not on this "
            "machine: `ckit doctor --site SITE` checks them on a cluster that has them")
