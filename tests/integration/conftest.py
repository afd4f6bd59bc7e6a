"""Session fixtures that start REAL components (tests/infra) lazily, only when a test asks for them.

A component that cannot start makes the test ERROR (never a skip). Healthy running components are reused.
Each session (and each xdist worker) holds a lease on what it uses; at the end the last holder stops the
component by pid, unless it was started with ``bash tests/infra/start.sh`` (kept until ``stop.sh``).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from tests.infra import components
from tests.infra.apptainer import Apptainer
from tests.infra.charliecloud import Charliecloud
from tests.infra.containers import remove_images
from tests.infra.daemon import Component
from tests.infra.frameworks import FrameworkVenv, FrameworkWheels, HorovodVenv
from tests.infra.images import BusyboxImage, DebianImage
from tests.infra.podman import PodmanService
from tests.infra.registry import AuthRegistry, Registry, RegistryInfo, TLSRegistry
from tests.infra.slurm import PARTITIONS, Munge
from tests.infra.slurm import Slurm as SlurmCluster
from tests.infra.users import NAMES, User, ensure
from tests.integration import torch_image as torch
from tests.integration.folders import readable_folder
from tests.realrun import USED

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


C = TypeVar("C", bound=Component)
@contextmanager
def running(component: C) -> Iterator[C]:
    """Start ``component`` (reusing a healthy one) under a lease of this process; the last holder stops it."""
    components.write_env_file()
    USED.add(component.name)
    component.acquire()
    try:
        yield component
    finally:
        component.release()


@contextmanager
def environ(env: dict[str, str]) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield


@dataclass(frozen=True)
class Podman:
    """The podman API service: ``docker.from_env()`` works once this fixture is active."""

    docker_host: str  # "unix:///…/.run/podman.sock"
    env: dict[str, str] = field(default_factory=dict)  # DOCKER_HOST, CONTAINERS_*, REGISTRY_AUTH_FILE


@dataclass(frozen=True)
class Slurm:
    """A single-node Slurm 22.05: sbatch/srun/sinfo work with ``env`` (SLURM_CONF) applied."""

    env: dict[str, str]  # SLURM_CONF
    partition: str  # the default partition, "debug"
    partitions: tuple[str, ...]
    nodename: str  # `hostname -s`
    cpus: int
    workdir: Path  # a job dir under the run dir (or use tmp_path with --chdir / -o)


@pytest.fixture(scope="session")
def podman() -> Iterator[Podman]:
    """The podman API service; its variables are set in os.environ for the session (subprocesses see them)."""
    with running(PodmanService()) as service, environ(service.env()):
        yield Podman(docker_host=service.docker_host, env=service.env())


@pytest.fixture
def podman_tags(podman: Podman) -> Iterator[Callable[[str], str]]:
    """``podman_tags(ref)`` gives ``ref`` back and removes that name from the shared podman store when the test
    ends. Give names unique to the test run (a uuid in the repository or the tag): another session may be running
    the same test against the same store."""
    made: list[str] = []

    def tag(ref: str) -> str:
        made.append(ref)
        return ref

    yield tag
    import docker

    remove_images(docker.from_env(), made)


@pytest.fixture(scope="session")
def busybox_image(podman: Podman) -> Iterator[str]:
    """``localhost/busybox:1.36`` (busybox-static, an applet symlink per command in /bin, CMD /bin/sh)."""
    with running(BusyboxImage()) as image:
        yield image.ref


@pytest.fixture(scope="session")
def debian_image(podman: Podman) -> Iterator[str]:
    """``localhost/debian:bookworm`` (mmdebstrap minbase, CMD /bin/bash; the tar is cached in ~/.cache/ckit-test)."""
    with running(DebianImage()) as image:
        yield image.ref


@pytest.fixture(scope="session")
def registry() -> Iterator[RegistryInfo]:
    """Plain-http registry without auth: ``.url``/``.host`` == "127.0.0.1:5000"."""
    with running(Registry()) as reg:
        yield reg.info()


@pytest.fixture(scope="session")
def registry_auth() -> Iterator[RegistryInfo]:
    """htpasswd registry on 127.0.0.1:5001: ``.host``, ``.username``, ``.password``, ``.auth_config``."""
    with running(AuthRegistry()) as reg:
        yield reg.info()


@pytest.fixture(scope="session")
def registry_tls() -> Iterator[RegistryInfo]:
    """https registry on 127.0.0.1:5002: ``.host``, ``.ca_file`` (the test CA), ``.cert_dir``, ``.base_url``."""
    with running(TLSRegistry()) as reg:
        yield reg.info()


@pytest.fixture(scope="session")
def slurm() -> Iterator[Slurm]:
    """munged + slurmctld + slurmd; SLURM_CONF is also set in os.environ for the session."""
    with running(Munge()), running(SlurmCluster()) as cluster, environ(cluster.env()):
        yield Slurm(
            env=cluster.env(),
            partition=PARTITIONS[0],
            partitions=PARTITIONS,
            nodename=cluster.nodename,
            cpus=cluster.cpus,
            workdir=cluster.workdir,
        )


@pytest.fixture(scope="session")
def frameworks() -> Iterator[FrameworkVenv]:
    """A venv seeing Debian's python3-torch and mpi4py, with tensorflow-cpu and ray (``.path``, ``.python``)."""
    with running(FrameworkVenv()) as venv:
        yield venv


@pytest.fixture(scope="session")
def horovod() -> Iterator[HorovodVenv]:
    """A venv with Horovod (Gloo, PyTorch) built against Debian's python3-torch."""
    with running(HorovodVenv()) as venv:
        yield venv


@pytest.fixture(scope="session")
def framework_wheels(frameworks: FrameworkVenv) -> Iterator[FrameworkWheels]:
    """The frameworks venv's pins as wheels (``.path``, with requirements.txt), for an image built offline."""
    with running(FrameworkWheels()) as wheels:
        yield wheels


@pytest.fixture(scope="session")
def torch_image(podman: Podman, debian_image: str, framework_wheels: FrameworkWheels) -> Iterator[str]:
    """``ckit build test-torch`` (tests/integration/torch_image.py), once per session for every module with
    framework jobs; removed from podman's store at the session's end (3 GB)."""
    import docker

    tag = torch.build("--set", f"files.src={framework_wheels.path}")["tag"]
    yield tag
    remove_images(docker.from_env(), [tag])


@pytest.fixture(scope="session")
def torch_sqsh(torch_image: str, framework_wheels: FrameworkWheels) -> Iterator[str]:
    """The same image as a .sqsh ``ckit build --to sqsh`` wrote, in a folder every user (and node) can read."""
    with torch.torch_sqsh(framework_wheels.path) as path:
        yield path


@pytest.fixture(scope="module")
def victim() -> User:
    """The co-tenant tests' user whose files and jobs the other one attacks (tests/infra/users.py)."""
    return ensure(NAMES[0])


@pytest.fixture(scope="module")
def attacker() -> User:
    return ensure(NAMES[1])


@pytest.fixture(scope="session")
def charliecloud() -> Iterator[Charliecloud]:
    """ch-run, and the unprivileged user ``.user`` (pwd entry) that may use /dev/fuse and user namespaces."""
    with running(Charliecloud()) as component:
        yield component


@pytest.fixture(scope="session")
def apptainer() -> Iterator[Apptainer]:
    """Debian's Apptainer 1.4.5 (``.binary``; ``.bin_dir`` has ``apptainer`` and ``singularity``) and its modules
    under the sites' names (``.modulefiles``); called, it runs ``apptainer ARGS``. An ERROR, never a skip."""
    with running(Apptainer()) as component:
        yield component


@pytest.fixture(scope="session")
def busybox_sqsh(busybox_image: str, charliecloud: Charliecloud) -> Iterator[Path]:
    """busybox as a .sqsh written by ``ckit convert``, in a folder every user can read (ch-run runs it)."""
    from buildkit.cli import main

    with readable_folder("ckit-sqsh-") as folder:
        path = folder / "busybox.sqsh"
        with contextlib.redirect_stdout(io.StringIO()):  # convert prints the path: not into a test's capsys
            assert main(["-q", "convert", f"docker-daemon:{busybox_image}", "--to", "sqsh", "-o", str(path)]) == 0
        yield path
