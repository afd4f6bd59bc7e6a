"""What ckit writes for a Singularity site, run by the real Apptainer (Debian's 1.4.5, tests/infra/apptainer.py):
the default ``.sif`` and a zstd one, the checks a user meets (inspect, run with arguments, exec, the environment
and ``--cleanenv``, binds, exit codes), ``apptainer pull oras://`` of a ``.sif`` ckit pushed, ``--nv`` without
GPUs, a ``--workdir`` the container lacks, and ``ckit build --engine apptainer`` with the ``singularity`` binary.

What only SingularityCE 3.x showed (it refuses a zstd ``.sif``; its ``pull oras://`` finds only the first SIF
layer type) is held by the site profiles and buildkit.site.compat, checked by ``ckit doctor`` on a site that runs
it (tests/unit/test_sif_compat.py pins the rules).

One image for the module: the ``demo`` stack (hello on the local Debian), built by podman and converted by
``ckit convert`` with its defaults.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from buildkit.site.compat import SIF_LAYER_PROTO, SIF_LAYER_V1
from tests.infra.containers import remove_images
from tests.integration.registry_helpers import ckit, unique_repo
from tests.integration.singularity_helpers import launch, module_folder, sites_for_this_machine


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with module_folder(tmp_path_factory, "sing-runtime") as path:
        yield path


@pytest.fixture(scope="module")
def env(folder: Path, podman: Any, slurm: Any) -> dict[str, str]:
    """The module's store, and twnia2, tara and neuron as this machine runs them (singularity_helpers)."""
    sites = sites_for_this_machine(folder, slurm.cpus)
    return {"CKIT_CACHE_DIR": str(folder / "cache"), "CKIT_SITES_PATH": str(sites)}


@pytest.fixture(scope="module")
def demo(env: dict[str, str], debian_image: str) -> Iterator[str]:
    """``ckit build demo`` with podman: the image tag (removed from podman's store when the module ends)."""
    import docker

    built = ckit("build", "demo", "--tag", f"localhost/ckit-sing/{unique_repo('demo')}:1", "--json", env=env)
    assert built.returncode == 0, built.stderr
    tag = json.loads(built.stdout)["tag"]
    yield tag
    remove_images(docker.from_env(), [tag])


@pytest.fixture(scope="module")
def plain_sif(busybox_image: str, env: dict[str, str], folder: Path) -> Path:
    """busybox, which has no ENTRYPOINT, as a .sif: a task's command runs as it is."""
    out = folder / "busybox.sif"
    made = ckit("convert", f"docker-daemon:{busybox_image}", "--to", "sif", "--compress", "gzip", "-o", str(out),
                env=env)
    assert made.returncode == 0, made.stderr
    return out


@pytest.fixture(scope="module")
def demo_sif(demo: str, env: dict[str, str], folder: Path) -> Path:
    """The demo image as ``ckit convert`` writes a .sif by default (no --site, no --compress)."""
    out = folder / "demo.sif"
    made = ckit("convert", f"docker-daemon:{demo}", "--to", "sif", "-o", str(out), "--json", env=env)
    assert made.returncode == 0, made.stderr
    return out


def test_the_default_and_a_zstd_sif_run(apptainer: Any, demo: str, demo_sif: Path, env: dict[str, str],
                                       folder: Path) -> None:
    """The default .sif (gzip, which every runtime reads) and a zstd one (Apptainer >= 1.4) both run; a site whose
    singularity is 3.x gets the zstd one refused before it is copied there."""
    ran = apptainer("exec", str(demo_sif), "cat", "/opt/ckit-demo/build-check.txt")
    assert (ran.returncode, ran.stdout) == (0, "ckit-demo 1.0\n"), ran.stderr
    zstd = folder / "demo-zstd.sif"
    assert ckit("convert", f"docker-daemon:{demo}", "--to", "sif", "--compress", "zstd", "-o", str(zstd),
                env=env).returncode == 0
    assert b"zstd" in subprocess.run(["unsquashfs", "-s", "-o", str(_offset(zstd)), str(zstd)],  # noqa: S607
                                     capture_output=True, check=True, timeout=60).stdout
    ran = apptainer("exec", str(zstd), "cat", "/opt/ckit-demo/build-check.txt")
    assert (ran.returncode, ran.stdout) == (0, "ckit-demo 1.0\n"), ran.stderr
    staged = ckit("stage", str(zstd), "--site", "twnia2", "--dest", str(folder / "staged"), env=env)
    assert staged.returncode == 2 and "is zstd-compressed; twnia2's kernel mounts only gzip, xz, lzo" in staged.stderr


def test_a_site_with_apptainer_1_4_gets_zstd(apptainer: Any, demo: str, env: dict[str, str], folder: Path) -> None:
    """A profile that says ``apptainer 1.4`` makes ckit write the .sif zstd-compressed, and it runs there."""
    site = folder / "sites-apptainer"
    site.mkdir(exist_ok=True)
    (site / "lab14.yaml").write_text(LAB_14)
    out = folder / "lab14.sif"
    made = ckit("convert", f"docker-daemon:{demo}", "--to", "sif", "--site", "lab14", "-o", str(out),
                env={**env, "CKIT_SITES_PATH": str(site)})
    assert made.returncode == 0, made.stderr
    assert b"zstd" in subprocess.run(["unsquashfs", "-s", "-o", str(_offset(out)), str(out)],  # noqa: S607
                                     capture_output=True, check=True, timeout=60).stdout
    ran = apptainer("run", str(out))
    assert ran.returncode == 0 and ran.stdout.startswith("hello from ckit\n"), ran.stderr


LAB_14 = """\
name: lab14
description: a lab whose nodes run Apptainer 1.4
scheduler: slurm
compute_internet: true
partitions: {gpu: {gpus_per_node: 0, cpus_per_node: 2}}
default_partition: gpu
runtimes: [{kind: apptainer, version: "1.4"}]
"""


def _offset(sif: Path) -> int:
    """Where the .sif's squashfs partition starts (its descriptor, as ``siftool list`` prints it)."""
    from buildkit.image.sif.read import read_sif

    partition = read_sif(sif).primary_partition()
    assert partition is not None
    return partition.offset


def test_what_a_user_checks(apptainer: Any, demo_sif: Path, folder: Path) -> None:
    sif = str(demo_sif)
    labels = apptainer("inspect", sif)
    assert labels.returncode == 0 and "io.ckit.stack: demo" in labels.stdout, labels.stderr
    assert "OCI_ENTRYPOINT='\"hello\"'" in apptainer("inspect", "--runscript", sif).stdout
    greet = apptainer("run", sif)
    assert greet.returncode == 0 and greet.stdout.splitlines()[0] == "hello from ckit", greet.stderr
    args = apptainer("run", sif, "a b", "c")  # ENTRYPOINT kept, CMD replaced
    assert args.stdout.splitlines()[:2] == ["arg: a b", "arg: c"], args.stderr
    assert apptainer("exec", sif, "hello", "--version").stdout == "ckit-demo 1.0\n"  # image PATH
    # the image's ENV wins over the host's (Apptainer, SingularityCE >= 3.6): what a job passes goes in as
    # APPTAINERENV_/SINGULARITYENV_, which win over both (ckit's task lines do that for --env)
    host = {"CKIT_DEMO_GREETING": "from the host"}
    assert apptainer("run", sif, env=host).stdout.startswith("hello from ckit\n")
    clean = apptainer("run", "--cleanenv", sif, env=host)
    assert clean.stdout.startswith("hello from ckit\n")
    for prefix in ("SINGULARITYENV_", "APPTAINERENV_"):
        forced = apptainer("run", "--cleanenv", sif, env={f"{prefix}CKIT_DEMO_GREETING": "forced"})
        assert forced.stdout.startswith("forced\n"), forced.stderr
    data = folder / "data"
    data.mkdir(exist_ok=True)
    (data / "x.txt").write_text("bound\n")
    bound = apptainer("exec", "--bind", f"{data}:/mnt/data:ro", sif, "cat", "/mnt/data/x.txt")
    assert (bound.returncode, bound.stdout) == (0, "bound\n"), bound.stderr
    assert apptainer("exec", sif, "sh", "-c", "exit 7").returncode == 7
    assert apptainer("exec", sif, "no-such-program").returncode != 0


def test_apptainer_pulls_what_ckit_pushed(apptainer: Any, registry: Any, demo_sif: Path,
                                          env: dict[str, str], folder: Path) -> None:
    """``apptainer pull oras://`` of what ``ckit push`` sent: the first SIF layer type (every version pulls it;
    the default) and v1 (what a site at singularity 3.11 gets); ckit pulls both back byte for byte."""
    pushed = {}
    for tag, site in (("plain", None), ("neuron-3.11", "neuron")):
        ref = f"{registry.host}/{unique_repo('app-oras')}:{tag}"
        where = ["--site", "neuron"] if site else []
        done = ckit("push", str(demo_sif), ref, *where, "--json", env={**env, "CKIT_SITES_PATH": ""})
        assert done.returncode == 0, done.stderr
        pushed[tag] = ref
    for tag in pushed:
        out = folder / f"pulled-{tag}.sif"
        ran = apptainer("pull", "--no-https", str(out), f"oras://{pushed[tag]}")
        assert ran.returncode == 0, ran.stderr
        assert out.read_bytes() == demo_sif.read_bytes()
        assert apptainer("run", str(out)).stdout.startswith("hello from ckit\n")
        got = ckit("pull", pushed[tag], "-o", str(folder / f"ckit-{tag}"), "--json", env=env)
        assert got.returncode == 0 and Path(json.loads(got.stdout)["path"]).read_bytes() == demo_sif.read_bytes()
    layers = {tag: _layer_type(registry, ref) for tag, ref in pushed.items()}
    assert layers == {"plain": SIF_LAYER_PROTO, "neuron-3.11": SIF_LAYER_V1}


def _layer_type(registry: Any, ref: str) -> str:
    import requests

    repo, tag = ref.split("/", 1)[1].rsplit(":", 1)
    manifest = requests.get(f"http://{registry.host}/v2/{repo}/manifests/{tag}", timeout=30, headers={
        "Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
    (layer,) = manifest["layers"]
    return str(layer["mediaType"])


def test_nv_on_a_node_without_gpus_goes_on(apptainer: Any, slurm: Any, demo_sif: Path) -> None:
    ran = subprocess.run(["srun", "-p", "multi", "-N", "2", str(apptainer.binary), "exec", "--nv",  # noqa: S607
                          str(demo_sif), "hostname"], capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0 and sorted(ran.stdout.split()) == ["n1", "n2"], ran.stderr


def test_a_workdir_the_container_lacks_fails_the_job(apptainer: Any, slurm: Any, plain_sif: Path, demo_sif: Path,
                                                    env: dict[str, str], folder: Path) -> None:
    """A job whose --workdir the container lacks fails, naming it: SingularityCE 3.x would start in $HOME with
    exit 0, so ckit's task checks it itself (``ckit: --workdir … is not a folder``); Apptainer, which the site's
    ``singularity`` is here, refuses before that check runs. The demo image's ENTRYPOINT (``hello``, the
    application itself) gets the command as its arguments, as ``run``."""
    jobs = folder / "jobs-workdir"
    jobs.mkdir(exist_ok=True)
    modules = ("--env", f"MODULEPATH={apptainer.modulefiles}")
    missing = launch("twnia2", jobs, env, *modules, "--image", str(plain_sif), "--workdir", "/no/such/folder",
                     "--", "pwd")
    assert missing.returncode != 0, missing.log
    assert "chdir /no/such/folder: no such file or directory" in missing.log, missing.log
    assert "/root" not in missing.log.split()
    there = launch("twnia2", jobs, env, *modules, "--image", str(plain_sif), "--workdir", "/etc", "--", "pwd")
    assert there.returncode == 0 and there.log.split() == ["/etc"], there.log + there.ran.stderr
    hello = launch("twnia2", jobs, env, *modules, "--image", str(demo_sif), "--workdir", "/opt/ckit-demo",
                   "--", "a b", "$$HOME")
    assert hello.returncode == 0 and hello.log.splitlines()[:2] == ["arg: a b", "arg: $HOME"], hello.log


def test_the_apptainer_engine_builds_with_singularity(apptainer: Any, registry: Any, demo: str,
                                                      env: dict[str, str], folder: Path) -> None:
    """``singularity`` (Apptainer) builds the rendered .def from the Debian base on the local registry; the .sif
    does what the podman-built image does."""
    base = f"{registry.host}/{unique_repo('sing-base')}"
    copied = subprocess.run(["skopeo", "copy", "-q", "--dest-tls-verify=false",  # noqa: S607
                             "containers-storage:localhost/debian:bookworm", f"docker://{base}/debian:bookworm"],
                            capture_output=True, text=True, check=False, timeout=300)
    assert copied.returncode == 0, copied.stderr
    on_path = {**env, "PATH": f"{apptainer.bin_dir}:{os.environ['PATH']}"}
    registry_set = f"debian.registry={base}"
    args = ("build", "demo", "--engine", "apptainer", "--set", registry_set, "-o", str(folder / "built"), "--json")
    built = ckit(*args, env=on_path)
    assert built.returncode == 0, built.stderr
    (artifact,) = json.loads(built.stdout)["artifacts"]
    sif = artifact["path"]
    ran = apptainer("run", sif)
    assert ran.returncode == 0 and ran.stdout.splitlines()[0] == "hello from ckit", ran.stderr
    check = apptainer("exec", sif, "cat", "/opt/ckit-demo/build-check.txt").stdout
    podman = subprocess.run(["podman", "run", "--rm", "--entrypoint", "cat", demo,  # noqa: S607
                             "/opt/ckit-demo/build-check.txt"], capture_output=True, text=True, check=False, timeout=120)
    assert check == podman.stdout == "ckit-demo 1.0\n", podman.stderr
    assert "io.ckit.stack: demo" in apptainer("inspect", sif).stdout
    again = ckit(*args, env=on_path)
    assert again.returncode == 0 and json.loads(again.stdout)["artifacts"][0]["cache_hit"] is True


def test_env_values_win_over_the_images_env_in_every_task(apptainer: Any, slurm: Any, demo_sif: Path,
                                                          env: dict[str, str], folder: Path) -> None:
    """The demo image sets CKIT_DEMO_GREETING in its ENV; the job's ``--env`` value reaches every task anyway
    (Apptainer lets the image's ENV win over a host variable: ckit passes it as SINGULARITYENV_/APPTAINERENV_)."""
    jobs = folder / "jobs-env"
    jobs.mkdir(exist_ok=True)
    job = launch("twnia2", jobs, env, "--env", f"MODULEPATH={apptainer.modulefiles}", "--env",
                 "CKIT_DEMO_GREETING=from the job", "-N", "2", "--image", str(demo_sif), "--", "--greet")
    assert job.returncode == 0, job.log + job.ran.stderr
    hosts = [line for line in job.log.splitlines() if line.startswith("host: ")]
    assert sorted(line.split()[1] for line in hosts) == ["n1", "n2"], job.log
    assert job.log.count("from the job\n") == len(hosts) and "hello from ckit" not in job.log, job.log
