"""Time to first step: from ``srun`` to the container's first command, under the real Pyxis 0.24.0 and enroot 4.1.2
of the test Slurm (tests/infra/pyxis.py, node n1), every start path on one image in one run, each as a ratio to
what Pyxis does by itself (``enroot import`` of the registry image, then ``enroot create``, cold: the node's
enroot layer cache emptied first).

The image is bench_stream's ``torch`` (Debian 12 with Debian's python3-torch and python3-numpy, one layer, about
1.4 GB), pushed in the docker format to a plain-http registry on the cluster network. Measured, each the best of
:data:`REPEAT` unless said:

* a ``.sqsh`` path (``ckit convert`` of the same image with what ckit writes for a squashfuse site, ``lz4:1``, on
  a folder every node reads) with Pyxis's defaults (``enroot create`` unpacks it) and with ``use_squashfuse=1``
  (started straight from it);
* ckit's importer (``importer=`` a wrapper naming its config, as an admin installs it), cold (an empty cache: the
  step's ``get`` converts) and cached, without ``use_squashfuse=1`` (ckit's default ``zstd:-3``) and with it
  (``lz4:1``, as for a site whose profile says squashfuse); its peak RSS and the wall time of each of its gets
  (``/usr/bin/time`` around every call);
* ``ckit convert docker://`` of the image alone (``lz4:1``), cold, on the host (what a cold start cannot beat);
* reading every file of the image inside the container, started through squashfuse (from the importer's ``lz4:1``
  file, and from a ``zstd:-3`` one: the reason for the choice) and from the tree ``enroot create`` unpacked (the
  first read in a fresh container, the image's file in the page cache);
* Singularity: ``ckit stage`` of the image for a SingularityCE 3.4.2 site (a gzip ``.sif``), then
  ``srun singularity exec`` of it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.bench import BenchResult, sh
from tests.bench.bench_convert import ckit_cli
from tests.bench.bench_stream import build
from tests.infra import components, pyxis
from tests.infra.singularity import BINARY as SINGULARITY
from tests.infra.slurm import PYXIS_RUNTIME
from tests.integration.pyxis_helpers import IMPORTER
from tests.integration.pyxis_jobs import nodes_registry

REPEAT = 2
NODE = "n1"
FIRST = "date +%s.%N"  # the container's first command: when it ran
# every file of the image, read once; prints the seconds it took
READ_ALL = ("s=$(date +%s.%N); find / -xdev -type f -print0 2>/dev/null | xargs -0 cat >/dev/null 2>&1; "
            "e=$(date +%s.%N); echo \"read $s $e\"")


def first_step(env: dict[str, str], image: str, command: str = FIRST) -> tuple[float, str]:
    """Seconds from ``srun`` to the container's first command on NODE, and what the step printed."""
    began = time.time()
    done = subprocess.run(["srun", "-p", "multi", "-w", NODE, f"--container-image={image}", "sh", "-c",  # noqa: S607
                           command], env=env, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"srun --container-image={image} failed: {done.stderr[-2000:]}")
    return float(done.stdout.split()[0]) - began, done.stdout


def read_through(env: dict[str, str], image: str) -> float:
    """Seconds to read every file of the image in a fresh container."""
    out = first_step(env, image, f"{FIRST}; {READ_ALL}")[1]
    words = re.search(r"^read (\S+) (\S+)$", out, re.M)
    if words is None:
        raise RuntimeError(f"no read time in {out!r}")
    return float(words[2]) - float(words[1])


def clear_enroot_cache() -> None:
    """The node's enroot layer cache emptied, so that ``enroot import`` downloads every layer as on a new node."""
    run = Path(os.environ["CKIT_RUN_DIR"])
    cache = pyxis.enroot_home(run, NODE) / "cache"
    for user in cache.glob("user-*"):
        shutil.rmtree(user, ignore_errors=True)


class Importer:
    """The importer as an admin installs it: a wrapper naming its config; the cache folder it names is switched
    between measurements (an empty one for a cold start). Every call's peak RSS and wall time are appended to
    ``rss``."""

    def __init__(self, work: Path, registry: str) -> None:
        self.compression = ""
        self.conf, self.rss, self.wrapper = work / "importer.yaml", work / "importer-rss.log", work / "importer"
        self.registry, self.work, self.caches = registry, work, 0
        self.wrapper.write_text(f"#!/bin/sh\nCKIT_IMPORTER_CONFIG={self.conf} exec /usr/bin/time -a -o {self.rss} "
                                f"-f '%M %e %C' {IMPORTER} \"$@\"\n")
        self.wrapper.chmod(0o755)
        self.fresh()

    def fresh(self) -> Path:
        self.caches += 1
        cache = self.work / f"cache-{self.caches}"
        cache.mkdir()
        self.conf.write_text(f"cache: {cache}\nallow_http: [{self.registry}]\n{self.compression}")
        return cache

    def calls(self) -> list[list[str]]:
        """Every call so far: peak RSS (KiB), seconds, argv."""
        if not self.rss.exists():
            return []
        return [line.split() for line in self.rss.read_text().splitlines() if line[:1].isdigit()]

    def peak_mb(self) -> float:
        return max(int(call[0]) for call in self.calls()) / 1024

    def fastest(self, verb: str, since: int, until: int | None = None) -> float:
        """The shortest wall time of the ``verb`` calls ``since`` to ``until`` (indexes of :meth:`calls`)."""
        return min(float(call[1]) for call in self.calls()[since:until] if call[3] == verb)


@contextlib.contextmanager
def configured(slurm_env: dict[str, str], importer: Importer | None, squashfuse: bool) -> Iterator[None]:
    conf_dir = Path(slurm_env["SLURM_CONF"]).parent
    with pyxis.configured(conf_dir, PYXIS_RUNTIME, importer=importer.wrapper if importer else None,
                          squashfuse=squashfuse):
        yield


def best(measure: Callable[[], float], repeat: int = REPEAT) -> float:
    return min(measure() for _ in range(repeat))


def run() -> list[BenchResult]:
    started = components.start(["podman", "debian", "slurm", "singularity"])
    os.environ.update(components.environment())
    work = Path(tempfile.mkdtemp(prefix="ckit-bench-ttfs-"))
    work.chmod(0o755)
    try:
        with nodes_registry() as host:
            ref = build("torch", work)
            sh("skopeo", "copy", "-q", "--format", "v2s2", "--dest-tls-verify=false", f"containers-storage:{ref}",
               f"docker://{host}/bench/torch:1")
            return measure(work, host, "bench/torch:1")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        components.stop([name for name, seconds in started.items() if seconds is not None])


def measure(work: Path, host: str, image: str) -> list[BenchResult]:
    env = {**os.environ, "ENROOT_LOGIN_SHELL": "no"}  # as ckit's jobs
    pyxis_ref = f"{host}#{image}"
    sqsh, zstd = work / "torch.sqsh", work / "torch-zstd.sqsh"
    convert_s = best(lambda: _convert(work, host, image, sqsh, "lz4:1"))
    _convert(work, host, image, zstd, "zstd:-3")
    timings: dict[str, float] = {"convert": convert_s}
    with configured(env, None, squashfuse=False):
        clear_enroot_cache()
        timings["enroot"] = first_step(env, pyxis_ref)[0]  # once: the slowest by far
        timings["sqsh"] = best(lambda: first_step(env, str(sqsh))[0])
        timings["read unpacked"] = best(lambda: read_through(env, str(sqsh)))
    with configured(env, None, squashfuse=True):
        timings["sqsh squashfuse"] = best(lambda: first_step(env, str(sqsh))[0])
        timings["read squashfuse zstd"] = best(lambda: read_through(env, str(zstd)))
    importer = Importer(work, host)
    for squashfuse in (False, True):
        importer.compression = "compression: lz4:1\n" if squashfuse else ""
        with configured(env, importer, squashfuse=squashfuse):
            tag = " squashfuse" if squashfuse else ""
            cold = len(importer.calls())
            timings[f"importer cold{tag}"] = best(lambda: (importer.fresh(), first_step(env, pyxis_ref)[0])[1])
            cached = len(importer.calls())
            timings[f"importer cached{tag}"] = best(lambda: first_step(env, pyxis_ref)[0], REPEAT + 1)
            # the gets alone, inside those starts: what the importer adds to the step's start
            timings[f"importer get cold{tag}"] = importer.fastest("get", cold, cached)
            timings[f"importer get cached{tag}"] = importer.fastest("get", cached)
            if squashfuse:
                timings["read squashfuse"] = best(lambda: read_through(env, pyxis_ref))
    timings.update(_singularity(work, host, image))
    return _results(timings, importer.peak_mb(), sqsh.stat().st_size)


def _convert(work: Path, host: str, image: str, out: Path, compression: str) -> float:
    cache = work / "convert-cache"
    out.unlink(missing_ok=True)
    os.sync()
    began = time.monotonic()
    sh(*ckit_cli("convert", f"docker://{host}/{image}", "--to", "sqsh", "--compress", compression, "--insecure",
                 "-o", str(out)),
       env={**os.environ, "CKIT_CACHE_DIR": str(cache)})
    seconds = time.monotonic() - began
    shutil.rmtree(cache)
    return seconds


SINGULARITY_SITE = """name: ttfs
description: a SingularityCE 3.4.2 site on this machine's test Slurm
scheduler: slurm
partitions: {multi: {gpus_per_node: 0}}
default_partition: multi
runtimes: [{kind: singularity, version: 3.4.2}]
compute_internet: true
"""


def _singularity(work: Path, host: str, image: str) -> dict[str, float]:
    """``ckit stage`` for a SingularityCE 3.4.2 site (cold), then ``srun singularity exec`` of the .sif."""
    sites, dest = work / "sites", work / "staged"
    sites.mkdir()
    (sites / "ttfs.yaml").write_text(SINGULARITY_SITE)
    env = {**os.environ, "CKIT_SITES_PATH": str(sites), "CKIT_CACHE_DIR": str(work / "stage-cache")}
    began = time.monotonic()
    sh(*ckit_cli("stage", f"{host}/{image}", "--site", "ttfs", "--dest", str(dest), "--insecure"), env=env)
    stage_s = time.monotonic() - began
    sif = next(dest.rglob("*.sif"))

    def exec_s() -> float:
        began = time.time()
        done = subprocess.run(["srun", "-p", "multi", "-w", NODE, str(SINGULARITY), "exec", str(sif), "sh", "-c",  # noqa: S607
                               FIRST], env=env, capture_output=True, text=True, timeout=600, check=True)
        return float(done.stdout.split()[0]) - began

    return {"singularity stage": stage_s, "singularity exec": best(exec_s)}


def _results(t: dict[str, float], rss_mb: float, sqsh_size: int) -> list[BenchResult]:
    anchor = t["enroot"]
    about = f"enroot import + create {anchor:.1f} s (once, cold)"

    def ratio(key: str, target: str = "", more: str = "") -> BenchResult:
        return BenchResult(f"{key} / enroot import (time to first step)", t[key] / anchor, target=target,
                           detail=f"{t[key]:.2f} s vs {about}{more}")

    return [
        ratio("sqsh", more="; enroot create unpacks the .sqsh"),
        ratio("sqsh squashfuse", more="; use_squashfuse=1, started straight from the .sqsh"),
        ratio("importer cold"), ratio("importer cached"),
        ratio("importer cold squashfuse"),
        ratio("importer cached squashfuse", "<= 0.01"),
        BenchResult("importer cached squashfuse / sqsh squashfuse (time to first step)",
                    t["importer cached squashfuse"] / t["sqsh squashfuse"], target="<= 1.5",
                    detail=f"{t['importer cached squashfuse']:.2f} s vs {t['sqsh squashfuse']:.2f} s; the importer's "
                           f"cached get alone {t['importer get cached squashfuse']:.2f} s (best)"),
        BenchResult("importer cold squashfuse / ckit convert docker:// (time)", t["importer cold squashfuse"] /
                    t["convert"], target="<= 1.1",
                    detail=f"{t['importer cold squashfuse']:.2f} s vs {t['convert']:.2f} s "
                           f"({sqsh_size / 1e6:.0f} MB .sqsh lz4:1); the importer's cold get alone "
                           f"{t['importer get cold squashfuse']:.2f} s (best)"),
        BenchResult("read the whole image: squashfuse / unpacked (time)", t["read squashfuse"] / t["read unpacked"],
                    target="<= 2", detail=f"{t['read squashfuse']:.2f} s (lz4:1) vs {t['read unpacked']:.2f} s, "
                                          "inside the container, first read"),
        BenchResult("read the whole image: squashfuse zstd:-3 / unpacked (time)",
                    t["read squashfuse zstd"] / t["read unpacked"],
                    detail=f"{t['read squashfuse zstd']:.2f} s: the same image as ckit's default .sqsh (zstd:-3), why "
                           "squashfuse sites get lz4:1"),
        BenchResult("importer peak RSS during a start", rss_mb, unit="MB", target="< 150",
                    detail="/usr/bin/time around every get and release, cold and cached"),
        ratio("singularity stage", more="; ckit stage to a gzip .sif, cold"),
        ratio("singularity exec", more="; srun singularity exec of the staged .sif"),
    ]
