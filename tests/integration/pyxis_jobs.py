"""Jobs that ``ckit launch`` writes for an oci-shaped site, run by the real Pyxis 0.24.0 and enroot 4.1.2 on the
test Slurm (tests/infra/pyxis.py), and what they leave on the nodes.

The site profile is sites/oci.yaml with only what this machine differs in: its partitions (``multi``: the
namespaced nodes n1 and n2, 2 CPUs each, no GPUs), a folder standing in for the cluster's shared home
(``/mnt/home/$USER`` is mounted into every container, as on OCI) and the shared image folder. Scripts are submitted
as ckit submits them (``--submit --wait``), or written and submitted with ``sbatch --export=NONE``.

The test image (:data:`WORK_IMAGE`) is the ``demo`` stack ``ckit build`` makes (its ENV prepends /opt/ckit-demo to
PATH, where ``hello`` is) with a WORKDIR and one more PATH entry, converted by ``ckit convert``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from buildkit.launch.slurmjobs import wait_for
from tests.infra import pyxis
from tests.infra.daemon import run_dir
from tests.infra.registry import Registry
from tests.infra.slurm import BRIDGE_NET, NODES, PYXIS_RUNTIME
from tests.integration.pyxis_helpers import IMPORTER, free_port
from tests.integration.registry_helpers import ckit

SITE = "ocilocal"
SITES = Path(__file__).resolve().parents[2] / "sites"
WORKDIR = "/srv/ckit-work"
IMAGE_PATH = f"{WORKDIR}/bin:/opt/ckit-demo:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # its ENV
# `report`, found through the image's PATH only, says where it runs and what it sees; then `hello` (on the demo
# image's own PATH entry) greets
REPORT = """#!/bin/sh
echo "CKIT-REPORT rank=$SLURM_PROCID host=$(hostname) cwd=$(pwd) path=$PATH image=$CKIT_WORK_IMAGE probe=${CKIT_PROBE:-}"
exec hello --greet
"""
WORK_IMAGE = f"""\
FROM {{base}}
WORKDIR {WORKDIR}
ENV PATH={WORKDIR}/bin:$PATH CKIT_WORK_IMAGE={{name}}
COPY report bin/report
"""


def site_profile(folder: Path, *, importer: bool = False, squashfuse: bool = False) -> tuple[Path, Path]:
    """A sites folder holding ``ocilocal`` (sites/oci.yaml on this machine's partitions, its Pyxis runtime the one
    that runs here, with the plugstack options the module configures), and the home stand-in."""
    profile = yaml.safe_load((SITES / "oci.yaml").read_text())
    home = folder / "home"
    (home / "root").mkdir(parents=True, exist_ok=True)
    profile.update(name=SITE, default_partition="multi", mounts=[f"{home}/$USER:/mnt/home/$USER"],
                   shared_image_dir=str(folder / "shared" / "$USER"),
                   partitions={"multi": {"gpus_per_node": 0, "cpus_per_node": 2, "nodes": "n[1-2]"}})
    profile["runtimes"][0].update(version="0.24.0", enroot="4.1.2", squashfuse=squashfuse,
                                  **({"importer": "ckit"} if importer else {}))
    profile["facts"].pop("partitions")
    sites = folder / "sites"
    sites.mkdir(exist_ok=True)
    (sites / f"{SITE}.yaml").write_text(yaml.safe_dump(profile))
    return sites, home


class NodesRegistry(Registry):
    """A plain-http registry on the cluster network (the bridge's host address, 10.233.0.1): the nodes pull from
    it, as from a site's registry; the test registries on 127.0.0.1 are the host's own, which no node reaches."""

    def __init__(self) -> None:
        super().__init__(run_dir())
        self.name = f"registry-nodes-{os.getpid()}"
        self.port = free_port()

    @property
    def host(self) -> str:
        return f"{BRIDGE_NET}.1:{self.port}"

    def healthy(self) -> bool:  # always its module's own
        return False


@contextmanager
def nodes_registry() -> Iterator[str]:
    """The registry's host:port for the block; the registry and its storage are gone after it."""
    registry = NodesRegistry()
    registry.start()
    try:
        yield registry.host
    finally:
        registry.stop()
        shutil.rmtree(registry.home, ignore_errors=True)


@dataclass(frozen=True)
class Cluster:
    """The test Slurm with Pyxis configured for one module, and the site profile for it."""

    run: Path
    env: dict[str, str]  # what a user's shell on the login node has: SLURM_CONF, the sites folder, USER
    home: Path

    def containers(self) -> dict[str, list[str]]:
        """The enroot containers on the nodes of partition multi."""
        return {node: pyxis.containers(self.run, node) for node in NODES}

    def pyxis_log(self, job_id: str) -> list[str]:
        """What Pyxis logged for the job's steps on the nodes (slurmd's log: ``pyxis: …`` after ``[JOB.STEP]``)."""
        return [line.split("] ", 1)[1] for node in NODES
                for line in (self.run / "slurm" / "log" / f"slurmd-{node}.log").read_text(errors="replace").splitlines()
                if f"] [{job_id}." in line and "] pyxis: " in line]

    def unpacked(self, job_id: str) -> int:
        """How many times Pyxis unpacked an image for the job (``enroot create`` of a container filesystem)."""
        return sum("pyxis: creating container filesystem" in line for line in self.pyxis_log(job_id))

    def remove_containers(self) -> None:
        """What a test left (kept containers, a failed job's): removed as their user would, node by node."""
        for node, names in self.containers().items():
            data = pyxis.enroot_home(self.run, node) / "data" / "user-0"
            for name in names:
                subprocess.run([str(pyxis.ENROOT_BIN / "enroot"), "remove", "--force", name], check=False,  # noqa: S603
                               capture_output=True, env={"PATH": f"{pyxis.ENROOT_BIN}:/usr/bin:/bin",
                                                         "ENROOT_DATA_PATH": str(data), "HOME": "/root"})


@contextmanager
def pyxis_cluster(slurm: Any, folder: Path, *, importer: Path | None = None,
                  squashfuse: bool = False) -> Iterator[Cluster]:
    """Pyxis configured as asked for everything submitted in the block (one module at a time)."""
    sites, home = site_profile(folder, importer=importer is not None, squashfuse=squashfuse)
    run = Path(slurm.env["SLURM_CONF"]).parent.parent
    env = {**slurm.env, "CKIT_SITES_PATH": str(sites), "USER": "root"}
    with pyxis.configured(run / "slurm", PYXIS_RUNTIME, importer=importer, squashfuse=squashfuse):
        cluster = Cluster(run, env, home)
        try:
            yield cluster
        finally:
            cluster.remove_containers()


def importer_wrapper(folder: Path, cache: Path, registry: str, sites: Path | None = None) -> Path:
    """What an admin names as Pyxis's ``importer=``: ckit's importer with its config file (the cache folder,
    plain http for the test registry). Pyxis runs it with the job's environment, which may hold nothing of ours
    (``sbatch --export=NONE``): the config comes from the wrapper, as from /etc/ckit/importer.yaml on a site.
    With ``sites``, the config also names the site (``site: ocilocal``, found there) for its compressions."""
    config = folder / "importer.yaml"
    config.write_text(yaml.safe_dump({"cache": str(cache), "allow_http": [registry], **({"site": SITE} if sites else {})}))
    path = f"CKIT_SITES_PATH={sites} " if sites else ""
    wrapper = folder / "ckit-pyxis-importer"
    # every call is written down first (the test counts Pyxis's gets and releases): CALL JOB.STEP NODE
    calls = folder / "importer-calls.log"
    wrapper.write_text(f"#!/bin/sh\necho \"$1 $SLURM_JOB_ID.$SLURM_STEP_ID $(hostname)\" >> {calls}\n"
                       f"{path}CKIT_IMPORTER_CONFIG={config} exec {IMPORTER} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


@dataclass(frozen=True)
class Job:
    rc: int
    job_id: str
    text: str  # the job's output file
    script: str

    def reports(self) -> list[dict[str, str]]:
        """The ``report`` lines of the test image (``key=value`` words), by rank."""
        found = [dict(word.split("=", 1) for word in line.split()[1:]) for line in self.text.splitlines()
                 if line.startswith("CKIT-REPORT ")]
        return sorted(found, key=lambda r: r["rank"])


def launch(cluster: Cluster, folder: Path, *args: str, export_none: bool = False,
           env: dict[str, str] | None = None) -> Job:
    """``ckit launch --site ocilocal ARGS`` in ``folder``: submitted by ckit and waited for, or written and then
    submitted with ``sbatch --export=NONE`` (the login environment Slurm loads on the node, nothing of the submit
    shell's)."""
    shell = {**cluster.env, **(env or {})}
    name = f"pyx{uuid.uuid4().hex[:6]}"
    argv = ["launch", "--site", SITE, "-J", name, "--script", f"{name}.sbatch", *args]
    if not export_none:
        done = ckit(argv[0], "--json", "--submit", "--wait", *argv[1:], env=shell, cwd=folder)
        assert done.returncode == 0 or done.stdout, done.stderr
        result = json.loads(done.stdout)
        job, rc = result["job_id"], result["exit_code"]
    else:
        done = ckit(argv[0], "--no-submit", *argv[1:], env=shell, cwd=folder)
        assert done.returncode == 0, done.stderr
        sbatch = subprocess.run(["sbatch", "--export=NONE", "--parsable", f"{name}.sbatch"], cwd=folder,  # noqa: S607
                                env={**shell, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
        job = sbatch.stdout.strip().split(";")[0]
        rc = wait_for(job, poll=0.5)
    text = (folder / f"{name}-{job}.out").read_text(errors="replace")
    return Job(rc, job, text, (folder / f"{name}.sbatch").read_text())


def build_work_image(debian_image: str, name: str, folder: Path) -> str:
    """``ckit build demo`` and, on top, the WORKDIR and the PATH entry of :data:`WORK_IMAGE` (podman build)."""
    built = ckit("build", "demo", "--tag", f"localhost/ckit-pyxis-demo:{name}", "--json")
    assert built.returncode == 0, built.stderr
    context = folder / "context"
    context.mkdir(parents=True)
    (context / "Containerfile").write_text(WORK_IMAGE.format(base=json.loads(built.stdout)["tag"], name=name))
    (context / "report").write_text(REPORT)
    (context / "report").chmod(0o755)
    tag = f"localhost/ckit-pyxis-work:{name}"
    done = subprocess.run(["podman", "build", "-q", "-t", tag, str(context)],  # noqa: S607
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return tag


@dataclass(frozen=True)
class WorkImage:
    name: str  # what `report` prints as image=
    tag: str  # in podman's store
    sqsh: Path  # ckit convert's .sqsh, in a folder every node reads
    ref: str  # pushed by ckit push (its default format) to the plain-http registry on the cluster network
    digest: str  # its manifest's

    @property
    def pinned(self) -> str:
        return f"{self.ref.rsplit(':', 1)[0]}@{self.digest}"


@contextmanager
def work_image(debian_image: str, registry_host: str, folder: Path) -> Iterator[WorkImage]:
    """The test image built, converted and pushed once for a module; gone from podman's store after it."""
    import docker

    from tests.infra.containers import remove_images

    name = uuid.uuid4().hex[:8]
    tag = f"localhost/ckit-pyxis-work:{name}"
    try:
        assert build_work_image(debian_image, name, folder) == tag
        sqsh = folder / "work.sqsh"
        made = ckit("convert", f"docker-daemon:{tag}", "--to", "sqsh", "-o", str(sqsh))
        assert made.returncode == 0, made.stderr
        ref = f"{registry_host}/ckit-pyxis/{name}:1"
        pushed = ckit("push", f"docker-daemon:{tag}", ref, "--insecure")
        assert pushed.returncode == 0, pushed.stderr
        yield WorkImage(name, tag, sqsh, ref, pushed.stdout.strip().rsplit("@", 1)[1])
    finally:
        remove_images(docker.from_env(), [tag, f"localhost/ckit-pyxis-demo:{name}"])


def ran_everywhere(job: Job, image: WorkImage, *, cwd: str) -> None:
    """Both ranks ran ``report`` from ``image`` on n1 and n2, in ``cwd``, with the image's PATH."""
    reports = job.reports()
    assert [(r["rank"], r["host"]) for r in reports] == [("0", "n1"), ("1", "n2")], job.text
    assert {r["image"] for r in reports} == {image.name}, job.text
    assert {r["cwd"] for r in reports} == {cwd}, job.text
    assert {r["path"] for r in reports} == {IMAGE_PATH}, job.text
    assert job.text.count("hello from ckit") == 2, job.text


def ran_clean(cluster: Cluster, image: WorkImage, folder: Path, *args: str, cwd: str | None = None,
              export_none: bool = False) -> Job:
    """``ckit launch -N 2 ARGS -- report`` in ``folder``: it succeeded on both nodes (:func:`ran_everywhere`, in
    ``cwd``, by default the submit folder) and left no container on any node and no warning in its output."""
    job = launch(cluster, folder, "-N", "2", *args, "--", "report", export_none=export_none)
    assert job.rc == 0, job.text
    ran_everywhere(job, image, cwd=cwd or str(folder))
    assert cluster.containers() == {node: [] for node in NODES} and "ckit: warning" not in job.text, job.text
    return job
