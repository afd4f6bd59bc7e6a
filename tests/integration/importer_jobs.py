"""What the importer modules share: Pyxis configured with ckit's importer (tests/integration/pyxis_jobs.py's
wrapper), the registry on the cluster network, the test image pushed there, and the checks that the importer (not
enroot) made the containers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.infra import pyxis
from tests.infra.slurm import NODES
from tests.integration.pyxis_helpers import importer, pyxis_env
from tests.integration.pyxis_jobs import (
    Cluster,
    WorkImage,
    importer_wrapper,
    nodes_registry,
    pyxis_cluster,
    site_profile,
    work_image,
)


@dataclass(frozen=True)
class Importing:
    cluster: Cluster
    work: WorkImage
    registry: str  # host:port on the cluster network
    cache: Path  # the importer's cache folder (only ever read through `ckit-pyxis-importer get`)
    folder: Path



@contextmanager
def importing(slurm: Any, debian_image: str, folder: Path, *, squashfuse: bool) -> Iterator[Importing]:
    cache = folder / "cache"
    cache.mkdir()
    with nodes_registry() as registry:
        sites, _ = site_profile(folder, importer=True, squashfuse=squashfuse)
        wrapper = importer_wrapper(folder, cache, registry, sites)
        with pyxis_cluster(slurm, folder, importer=wrapper, squashfuse=squashfuse) as cluster, \
                work_image(debian_image, registry, folder / "work") as work:
            yield Importing(cluster, work, registry, cache, folder)


def calls(setup: Importing, job_id: str) -> list[str]:
    """Pyxis's calls of the importer for the job: ``get NODE`` and ``release NODE``, in order."""
    log = setup.folder / "importer-calls.log"
    words = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return [f"{call} {node}" for call, step, node in words if step.split(".")[0] == job_id]


def artifacts(setup: Importing) -> list[Path]:
    """The images the importer converted into the cache (every user's tree)."""
    return sorted(setup.cache.glob("u*/artifacts/*.sqsh"))


def holds(setup: Importing) -> list[Path]:
    """The steps that hold an image in the cache (every user's tree)."""
    return sorted(setup.cache.glob("u*/holds/*/*"))


def enroot_layers(cluster: Cluster) -> set[Path]:
    """The layers the nodes' enroot pulled (``enroot import`` caches each one; making a container from a file
    the importer printed pulls none)."""
    return {path for node in NODES for path in (pyxis.enroot_home(cluster.run, node) / "cache").rglob("*")
            if path.is_file()}


def served_from_cache(setup: Importing, ref: str) -> None:
    """The importer serves ``ref`` without converting it (a job's `get` did), asked the way Pyxis asks."""
    home = setup.folder / "home-get"
    home.mkdir(exist_ok=True)
    env = pyxis_env(home, setup.cache, extra={"CKIT_IMPORTER_CONFIG": str(setup.folder / "importer.yaml"),
                                              "CKIT_SITES_PATH": setup.cluster.env["CKIT_SITES_PATH"]})
    served = importer("get", "docker://" + ref.replace("/", "#", 1), env=env)
    assert served.returncode == 0, served.stderr
    assert Path(served.stdout.strip()).is_file() and "converting" not in served.stderr, served.stderr
    assert importer("release", env=env).returncode == 0
