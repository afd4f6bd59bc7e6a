"""Run a container through the docker SDK against podman 4.3 without its log-follow race.

``client.containers.run(image, cmd)`` (no ``detach``) follows the logs while the container runs. On podman 4.3
with the file events logger, that follow can miss the container's "died" event when the container exits
quickly, and then it hangs forever (seen intermittently under load). Waiting first and reading the finished
logs afterwards has no such race.
"""

from __future__ import annotations

from typing import Any


def run_container(client: Any, image: str, command: Any = None, **kwargs: Any) -> tuple[int, bytes]:
    """Create, start, wait, read logs (stdout+stderr), remove. Returns (exit code, output)."""
    container = client.containers.create(image, command, **kwargs)
    try:
        container.start()
        status = container.wait(timeout=300)["StatusCode"]
        return status, container.logs(stdout=True, stderr=True)
    finally:
        container.remove(force=True)
