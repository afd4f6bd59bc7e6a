"""The Pyxis importer: a cold ``get`` of a ~350 MB image against the enroot anchor pipeline measured in the same run,
a cached ``get`` (the console script, Python start-up included), and 16 concurrent cold gets against one.

The image is bench_convert's ``big`` image (Debian + /usr/lib/gcc + python3.11), pushed with gzip layers to a
registry of this benchmark's own. The enroot stand-in does what ``enroot import`` does, with the tools this machine
has: download and verify the layers (``skopeo copy`` to an OCI layout), unpack them into a directory (``umoci raw
unpack``, as bench_convert's pipeline) and squash it with enroot's default ``mksquashfs -comp lzo -noD -all-root``.
The importer is called as Pyxis calls it: ``ckit-pyxis-importer get docker://REGISTRY#IMAGE:TAG`` with a cache
folder from ``importer.yaml``.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.bench import BenchResult, sh
from tests.bench.bench_convert import IMAGES, build_image
from tests.infra import components
from tests.infra.registry import Registry

IMPORTER = str(Path(sys.executable).parent / "ckit-pyxis-importer")
JOBS = str(os.cpu_count() or 1)
HERD = 16


class ImporterRegistry(Registry):
    """A registry of its own, so that test runs on the shared ones cannot disturb it."""

    name = "registry-bench-importer"
    port = 5021


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    os.sync()
    began = time.monotonic()
    fn()
    return time.monotonic() - began


def get(uri: str, cache: Path, job: int = 1) -> subprocess.CompletedProcess[str]:
    conf = cache.parent / f"importer-{cache.name}.yaml"
    conf.write_text(f"cache: {cache}\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(cache.parent), "CKIT_IMPORTER_CONFIG": str(conf),
           "SLURM_JOB_ID": str(job), "SLURM_STEP_ID": "0", "PYXIS_VERSION": "0.24.0",
           "ENROOT_ALLOW_HTTP": "1"}  # as enroot itself needs for a registry over plain http
    done = subprocess.run([IMPORTER, "get", uri], env=env, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        raise RuntimeError(f"importer get failed: {done.stderr}")
    return done


def run() -> list[BenchResult]:
    started = components.start(["podman", "debian"])
    os.environ.update(components.environment())
    registry = ImporterRegistry()
    own = registry.start()
    work = Path(tempfile.mkdtemp(prefix="ckit-bench-importer-"))
    try:
        ref = build_image("big", IMAGES["big"], work)
        target = f"{registry.host}/bench/big:1"
        sh("skopeo", "copy", "-q", "--dest-tls-verify=false", f"containers-storage:{ref}", f"docker://{target}")
        return _measure(work, registry.host, "bench/big:1")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if own:
            registry.stop()
            shutil.rmtree(registry.home, ignore_errors=True)
        components.stop([name for name, seconds in started.items() if seconds is not None])


def _anchor(work: Path, host: str, image: str) -> tuple[float, int]:
    layout, rootfs, out = work / "anchor-layout", work / "anchor-rootfs", work / "anchor.sqsh"

    def pipeline() -> None:
        sh("skopeo", "copy", "-q", "--src-tls-verify=false", f"docker://{host}/{image}", f"oci:{layout}:a")
        sh("umoci", "raw", "unpack", "--image", f"{layout}:a", str(rootfs))
        sh("mksquashfs", str(rootfs), str(out), "-noappend", "-quiet", "-no-progress", "-processors", JOBS,
           "-comp", "lzo", "-noD", "-all-root")

    try:
        return timed(pipeline), out.stat().st_size
    finally:
        for path in (layout, rootfs):
            shutil.rmtree(path, ignore_errors=True)
        out.unlink(missing_ok=True)


ROUNDS = 3  # the machine is shared: each round times one cold get and one herd back to back


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _herd(uri: str, cache: Path) -> float:
    with ThreadPoolExecutor(max_workers=HERD) as pool:
        seconds = timed(lambda: list(pool.map(lambda j: get(uri, cache, job=j), range(HERD))))
    converted = len(list((cache / "artifacts").glob("*.sqsh")))
    if converted != 1:
        raise RuntimeError(f"{HERD} concurrent gets made {converted} conversions, not 1")
    return seconds


def _measure(work: Path, host: str, image: str) -> list[BenchResult]:
    uri = f"docker://{host}#{image}"
    anchor_s, anchor_size = min(_anchor(work, host, image) for _ in range(2))
    rounds, waiting_cpu = [], []
    for n in range(ROUNDS):
        cold_cache, herd_cache = work / f"cold-{n}", work / f"herd-{n}"
        cpu = children_cpu()
        cold = timed(lambda cold_cache=cold_cache: get(uri, cold_cache))
        cpu_cold, cpu = children_cpu() - cpu, children_cpu()
        rounds.append((cold, _herd(uri, herd_cache)))
        waiting_cpu.append((children_cpu() - cpu - cpu_cold) / (HERD - 1))
        shutil.rmtree(herd_cache)
        if n:
            shutil.rmtree(cold_cache)
    warm = work / "cold-0"
    size = next((warm / "artifacts").glob("*.sqsh")).stat().st_size
    hits = sorted(timed(lambda: get(uri, warm, job=9)) for _ in range(9))
    cold = min(c for c, _ in rounds)
    ratios = sorted(h / c for c, h in rounds)
    return [
        BenchResult("enroot pipeline / importer cold get (speed)", anchor_s / cold, target=">= 3",
                    detail=f"skopeo copy + umoci unpack + mksquashfs lzo -noD {anchor_s:.1f} s "
                           f"({anchor_size / 1e6:.0f} MB) vs ckit-pyxis-importer get {cold:.2f} s ({size / 1e6:.0f} "
                           "MB zstd:-3), both from the registry; best of 2 and 3"),
        BenchResult("importer cached get (wall, Python start-up included)", hits[len(hits) // 2], unit="s",
                    target="< 0.3", detail=f"median of {len(hits)}; min {hits[0]:.3f} s, max {hits[-1]:.3f} s"),
        BenchResult(f"{HERD} concurrent cold gets / one cold get (time)", ratios[len(ratios) // 2], target="<= 1.2",
                    detail=f"median of {ROUNDS} rounds ({', '.join(f'{h:.2f}/{c:.2f} s' for c, h in rounds)}); one "
                           f"conversion; the {HERD - 1} waiting processes take {min(waiting_cpu):.3f} CPU s each "
                           f"(start-up, wait for the first get's answer, hold) from the {JOBS} CPUs the conversion "
                           "uses"),
    ]
