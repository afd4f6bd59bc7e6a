"""Run a container through the docker SDK against podman 4.3 without its log-follow race; remove the names a
test gave images.

``client.containers.run(image, cmd)`` (no ``detach``) follows the logs while the container runs. On podman 4.3
with the file events logger, that follow can miss the container's "died" event when the container exits
quickly, and then it hangs forever (seen intermittently under load). Waiting first and reading the finished
logs afterwards has no such race.
"""

from __future__ import annotations

import contextlib
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


def remove_images(client: Any, refs: list[str]) -> None:
    """Remove these names from the shared podman store (all sessions and benchmarks use it): an image goes with
    its last name, and with it the intermediate images of its build; one another name keeps stays. Never by
    image ID: a concurrent session may have built the very same image."""
    import docker.errors

    for ref in refs:
        with contextlib.suppress(docker.errors.APIError):  # not there (a build that failed), or in use
            client.images.remove(ref)


def remove_replaced(client: Any, image_ids: list[str]) -> None:
    """Remove images a run built and then replaced under the same name: each rebuild leaves the one before it
    without a name, and with it the intermediate images of its changed steps. By ID, which is safe only for
    images of content the run made (a unique file or label): with their last name gone nobody else can use them.
    An ID that still has a name (or children) stays."""
    import docker.errors

    for image_id in image_ids:
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(image_id)
