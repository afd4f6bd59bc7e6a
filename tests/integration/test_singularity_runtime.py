"""What ckit writes for a Singularity site, run by the real SingularityCE 3.4.2 (tests/infra/singularity.py): the
default ``.sif``, the checks a user meets (inspect, run with arguments, exec, the environment and ``--cleanenv``,
binds, exit codes), ``singularity pull oras://`` of a ``.sif`` ckit pushed, ``--nv`` without GPUs, a ``--workdir``
the container lacks, and ``ckit build --engine apptainer`` with the ``singularity`` binary.

One image for the module: the ``demo`` stack (hello on the local Debian), built by podman and converted by
``ckit convert`` with its defaults; SingularityCE 3.4.2 reaches the plain-http test registry as ``localhost:PORT``.
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


def test_the_default_sif_runs_where_zstd_does_not(singularity: Any, demo: str, demo_sif: Path, env: dict[str, str],
                                                  folder: Path) -> None:
    """SingularityCE refuses a zstd partition in user space, whatever the kernel: the default is gzip."""
    ran = singularity("exec", str(demo_sif), "cat", "/opt/ckit-demo/build-check.txt")
    assert (ran.returncode, ran.stdout) == (0, "ckit-demo 1.0\n"), ran.stderr
    zstd = folder / "demo-zstd.sif"
    assert ckit("convert", f"docker-daemon:{demo}", "--to", "sif", "--compress", "zstd", "-o", str(zstd),
                env=env).returncode == 0
    refused = singularity("exec", str(zstd), "true")
    assert refused.returncode == 255 and "unknown compression algorithm value 6" in refused.stderr
    staged = ckit("stage", str(zstd), "--site", "twnia2", "--dest", str(folder / "staged"), env=env)
    assert staged.returncode == 2 and "is zstd-compressed; twnia2's kernel mounts only gzip, xz, lzo" in staged.stderr
    assert "its singularity 3.4.2 reads no zstd squashfs in a .sif" in staged.stderr


def test_what_a_user_checks(singularity: Any, demo_sif: Path, folder: Path) -> None:
    sif = str(demo_sif)
    labels = singularity("inspect", sif)
    assert labels.returncode == 0 and "io.ckit.stack: demo" in labels.stdout, labels.stderr
    assert "OCI_ENTRYPOINT='\"hello\"'" in singularity("inspect", "--runscript", sif).stdout
    greet = singularity("run", sif)
    assert greet.returncode == 0 and greet.stdout.splitlines()[0] == "hello from ckit", greet.stderr
    args = singularity("run", sif, "a b", "c")  # ENTRYPOINT kept, CMD replaced
    assert args.stdout.splitlines()[:2] == ["arg: a b", "arg: c"], args.stderr
    assert singularity("exec", sif, "hello", "--version").stdout == "ckit-demo 1.0\n"  # image PATH
    host = {"CKIT_DEMO_GREETING": "from the host"}
    assert singularity("run", sif, env=host).stdout.startswith("from the host\n")  # host wins
    clean = singularity("run", "--cleanenv", sif, env=host)
    assert clean.stdout.startswith("hello from ckit\n")
    forced = singularity("run", "--cleanenv", sif, env={"SINGULARITYENV_CKIT_DEMO_GREETING": "forced"})
    assert forced.stdout.startswith("forced\n")
    data = folder / "data"
    data.mkdir(exist_ok=True)
    (data / "x.txt").write_text("bound\n")
    bound = singularity("exec", "--bind", f"{data}:/mnt/data:ro", sif, "cat", "/mnt/data/x.txt")
    assert (bound.returncode, bound.stdout) == (0, "bound\n"), bound.stderr
    assert singularity("exec", sif, "sh", "-c", "exit 7").returncode == 7
    assert singularity("exec", sif, "no-such-program").returncode != 0


def test_singularity_pulls_what_ckit_pushed(singularity: Any, registry: Any, demo_sif: Path,
                                            env: dict[str, str], folder: Path) -> None:
    """3.4.2 finds only the first SIF layer type; ckit pushes it unless the site's version pulls v1."""
    port = registry.host.split(":")[1]
    pushed = {}
    for tag, site in (("plain", None), ("neuron-here", "neuron"), ("neuron-3.11", "builtin-neuron")):
        ref = f"{registry.host}/{unique_repo('sing-oras')}:{tag}"
        sites = {"CKIT_SITES_PATH": ""} if site == "builtin-neuron" else {}
        where = ["--site", "neuron"] if site else []
        done = ckit("push", str(demo_sif), ref, *where, "--json", env={**env, **sites})
        assert done.returncode == 0, done.stderr
        pushed[tag] = ref.replace(registry.host, f"localhost:{port}")  # 3.4.2 speaks http to localhost only
    for tag, layer in (("plain", SIF_LAYER_PROTO), ("neuron-here", SIF_LAYER_PROTO), ("neuron-3.11", SIF_LAYER_V1)):
        out = folder / f"pulled-{tag}.sif"
        ran = singularity("pull", str(out), f"oras://{pushed[tag]}")
        if layer == SIF_LAYER_V1:  # what a 3.11 site pulls; 3.4.2 does not know the type
            assert ran.returncode == 255 and "no layer found corresponding to SIF image" in ran.stderr
        else:
            assert ran.returncode == 0, ran.stderr
            assert out.read_bytes() == demo_sif.read_bytes()
            assert singularity("run", str(out)).stdout.startswith("hello from ckit\n")
        got = ckit("pull", pushed[tag], "-o", str(folder / f"ckit-{tag}"), "--json", env=env)  # ckit pulls both
        assert got.returncode == 0 and Path(json.loads(got.stdout)["path"]).read_bytes() == demo_sif.read_bytes()


def test_nv_on_a_node_without_gpus_warns_and_goes_on(singularity: Any, slurm: Any, demo_sif: Path) -> None:
    ran = subprocess.run(["srun", "-p", "multi", "-N", "2", str(singularity.binary), "exec", "--nv",  # noqa: S607
                          str(demo_sif), "hostname"], capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0 and sorted(ran.stdout.split()) == ["n1", "n2"], ran.stderr
    assert ran.stderr.count("Could not find any NVIDIA binaries on this host!") == 2


def test_a_workdir_the_container_lacks_fails_the_job(singularity: Any, slurm: Any, plain_sif: Path, demo_sif: Path,
                                                    env: dict[str, str], folder: Path) -> None:
    """singularity exec --pwd of a missing folder starts in $HOME with exit 0; the job must fail, naming it. The
    demo image's ENTRYPOINT (``hello``, the application itself) gets the command as its arguments, as ``run``."""
    jobs = folder / "jobs-workdir"
    jobs.mkdir(exist_ok=True)
    modules = ("--env", f"MODULEPATH={singularity.modulefiles}")
    missing = launch("twnia2", jobs, env, *modules, "--image", str(plain_sif), "--workdir", "/no/such/folder",
                     "--", "pwd")
    assert missing.returncode != 0, missing.log
    assert "ckit: --workdir /no/such/folder is not a folder in the container" in missing.log
    assert "/root" not in missing.log.split()
    there = launch("twnia2", jobs, env, *modules, "--image", str(plain_sif), "--workdir", "/etc", "--", "pwd")
    assert there.returncode == 0 and there.log.split() == ["/etc"], there.log + there.ran.stderr
    hello = launch("twnia2", jobs, env, *modules, "--image", str(demo_sif), "--workdir", "/opt/ckit-demo",
                   "--", "a b", "$$HOME")
    assert hello.returncode == 0 and hello.log.splitlines()[:2] == ["arg: a b", "arg: $HOME"], hello.log


def test_the_apptainer_engine_builds_with_singularity(singularity: Any, registry: Any, demo: str,
                                                      env: dict[str, str], folder: Path) -> None:
    """singularity 3.4.2 builds the rendered .def from the Debian base on the local registry; the .sif does what
    the podman-built image does."""
    base = f"{registry.host}/{unique_repo('sing-base')}"
    copied = subprocess.run(["skopeo", "copy", "-q", "--dest-tls-verify=false",  # noqa: S607
                             "containers-storage:localhost/debian:bookworm", f"docker://{base}/debian:bookworm"],
                            capture_output=True, text=True, check=False, timeout=300)
    assert copied.returncode == 0, copied.stderr
    on_path = {**env, "PATH": f"{singularity.bin_dir}:{os.environ['PATH']}"}
    registry_set = f"debian.registry={base.replace(registry.host, 'localhost:' + registry.host.split(':')[1])}"
    args = ("build", "demo", "--engine", "apptainer", "--set", registry_set, "-o", str(folder / "built"), "--json")
    built = ckit(*args, env=on_path)
    assert built.returncode == 0, built.stderr
    (artifact,) = json.loads(built.stdout)["artifacts"]
    sif = artifact["path"]
    ran = singularity("run", sif)
    assert ran.returncode == 0 and ran.stdout.splitlines()[0] == "hello from ckit", ran.stderr
    check = singularity("exec", sif, "cat", "/opt/ckit-demo/build-check.txt").stdout
    podman = subprocess.run(["podman", "run", "--rm", "--entrypoint", "cat", demo,  # noqa: S607
                             "/opt/ckit-demo/build-check.txt"], capture_output=True, text=True, check=False, timeout=120)
    assert check == podman.stdout == "ckit-demo 1.0\n", podman.stderr
    assert "io.ckit.stack: demo" in singularity("inspect", sif).stdout
    again = ckit(*args, env=on_path)
    assert again.returncode == 0 and json.loads(again.stdout)["artifacts"][0]["cache_hit"] is True
