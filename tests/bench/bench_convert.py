"""``ckit convert`` against the raw squashfs tools and against what apptainer and enroot run.

Images (built through the docker SDK on the podman service, deterministic: the same host files every run):
``small`` = localhost/debian:bookworm (~170 MB), ``big`` = + /usr/lib/gcc and /usr/lib/python3.11 (~350 MB),
``huge`` = + /usr/lib/x86_64-linux-gnu (~850 MB). The pre-flattened rootfs for the raw tools is ``podman
export`` of a container of the image (a tar for tar2sqfs, unpacked as root for mksquashfs); tar2sqfs runs with
ckit's layout choices (export table, 128 KiB blocks) and a deep block queue. All tools get the same thread count
(the machine's CPUs) and a warm page cache; cheap runs are repeated and the best kept, the slow anchors (gzip
level 9, lzo) run once. ckit is timed at its defaults (sqsh zstd:-3, sif zstd:1) against the anchors, and at
zstd:1 and zstd:3 against the raw tools at the same setting. The anchors are timed twice over: their squashfs
step alone on the pre-flattened rootfs, and as a pipeline from the same OCI layout ckit reads (unpack the layers
with umoci, then that squashfs step), which is what a user waits for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import docker.errors

from buildkit.image.convert import convert
from buildkit.storage.store import Store
from tests.bench import BenchResult, sh
from tests.infra import components

BASE = "localhost/debian:bookworm"
IMAGES = {
    "small": (),
    "big": ("/usr/lib/gcc", "/usr/lib/python3.11"),
    "huge": ("/usr/lib/gcc", "/usr/lib/python3.11", "/usr/lib/x86_64-linux-gnu"),
}
JOBS = str(os.cpu_count() or 1)
REPEAT = 3


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    began = time.monotonic()
    fn()
    return time.monotonic() - began


def build_image(name: str, dirs: tuple[str, ...], work: Path) -> str:
    if not dirs:
        return BASE
    ref = f"localhost/ckit-bench-{name}:1"
    client = docker.from_env()
    try:
        client.images.get(ref)  # the same host files every time: an existing build is the same image
        return ref
    except docker.errors.ImageNotFound:
        pass
    ctx = work / f"ctx-{name}"
    ctx.mkdir()
    lines = [f"FROM {BASE}"]
    for n, folder in enumerate(dirs):
        shutil.copytree(folder, ctx / f"d{n}", symlinks=True)
        lines.append(f"COPY d{n} /opt/bench{folder}")
    (ctx / "Dockerfile").write_text("\n".join(lines) + "\n")
    for attempt in range(3):  # the podman service is shared: another session may restart it meanwhile
        try:
            docker.from_env().images.build(path=str(ctx), tag=ref, rm=True)
            break
        except Exception as err:  # noqa: BLE001 - SDK, urllib3 and socket errors alike
            print(f"build of {ref} failed ({err.__class__.__name__}); retrying", file=sys.stderr)
            components.start(["podman", "debian"])
            if attempt == 2:
                raise
    shutil.rmtree(ctx)
    return ref


def save(ref: str, path: Path) -> Path:
    with path.open("wb") as out:
        for chunk in docker.from_env().images.get(ref).save(named=True):
            out.write(chunk)
    return path


def export_flat(ref: str, work: Path) -> tuple[Path, Path]:
    """The image flattened by podman: a tar, and that tar unpacked (as root: owners kept)."""
    client = docker.from_env()
    container = client.containers.create(ref, command=["/bin/true"])
    flat = work / "flat.tar"
    try:
        with flat.open("wb") as out:
            for chunk in container.export():
                out.write(chunk)
    finally:
        container.remove(force=True)
    rootfs = work / "rootfs"
    rootfs.mkdir()
    sh("tar", "-C", str(rootfs), "--numeric-owner", "-xpf", str(flat))
    return flat, rootfs


def umoci_unpack(layout: Path, work: Path) -> float:
    """Seconds for ``umoci raw unpack`` of the layout into a fresh directory (removed afterwards)."""
    rootfs = work / "umoci-rootfs"
    try:
        return timed(lambda: sh("umoci", "raw", "unpack", "--image", f"{layout}:bench", str(rootfs)))
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


def peak_rss_mb(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Peak RSS (MB) of the process tree of ``argv``, and its wall time."""
    began = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # noqa: S603
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return usage.ru_maxrss / 1024, time.monotonic() - began


def ckit_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "buildkit.cli", *args]


def run() -> list[BenchResult]:
    started = components.start(["podman", "debian"])
    os.environ.update(components.environment())
    work = Path(tempfile.mkdtemp(prefix="ckit-bench-"))
    results: list[BenchResult] = []
    try:
        archives = {name: save(build_image(name, dirs, work), work / f"{name}.tar") for name, dirs in IMAGES.items()}
        results += _raw_and_anchors(archives["big"], work, big_ref=build_image_ref("big"))
        results += _memory_and_cache(archives, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        components.stop([name for name, seconds in started.items() if seconds is not None])
    return results


def build_image_ref(name: str) -> str:
    return BASE if not IMAGES[name] else f"localhost/ckit-bench-{name}:1"


def _raw_and_anchors(archive: Path, work: Path, big_ref: str) -> list[BenchResult]:
    flat, rootfs = export_flat(big_ref, work)
    mb = sum(f.stat().st_size for f in rootfs.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6
    out = work / "out.sqsh"

    def tar2sqfs(level: int) -> float:
        """tar2sqfs on the pre-flattened tar, same jobs, zstd at ``level``."""
        argv = ["tar2sqfs", "--quiet", "--force", "--no-skip", "--exportable", "--num-jobs", JOBS,
                "--queue-backlog", "256", "-c", "zstd", "-X", f"level={level}", str(out)]
        with flat.open("rb") as stdin:
            return timed(lambda: sh(*argv, stdin=stdin))

    def mksquashfs(*opts: str) -> tuple[float, int]:
        seconds = timed(lambda: sh("mksquashfs", str(rootfs), str(out), "-noappend", "-quiet", "-no-progress",
                                   "-processors", JOBS, *opts))
        return seconds, out.stat().st_size

    def ckit(target: str, n: int, compress: str | None = None) -> tuple[float, int]:
        store = Store(work / f"store-{target}-{n}-{compress}")
        result = convert(f"docker-archive:{archive}", target, store=store, compress=compress)
        shutil.rmtree(store.root)
        return result.seconds, result.size

    # the cheap runs alternate, REPEAT times each, and keep the best: the machine may be shared
    runs: dict[str, list[float]] = {k: [] for k in ("tar2sqfs-1", "tar2sqfs-3", "mksquashfs-1", "mksquashfs-3",
                                                      "ckit-1", "ckit-3", "sqsh", "sif")}
    for n in range(REPEAT):
        for level in (1, 3):
            runs[f"tar2sqfs-{level}"].append(tar2sqfs(level))
            runs[f"mksquashfs-{level}"].append(mksquashfs("-comp", "zstd", "-Xcompression-level", str(level))[0])
            runs[f"ckit-{level}"].append(ckit("sqsh", n, f"zstd:{level}")[0])
        seconds, sqsh_size = ckit("sqsh", n)  # the defaults: zstd:-3 for sqsh, zstd:1 for sif
        runs["sqsh"].append(seconds)
        seconds, sif_size = ckit("sif", n)
        runs["sif"].append(seconds)
    best = {k: min(v) for k, v in runs.items()}
    apptainer_s, apptainer_size = mksquashfs("-comp", "gzip")
    enroot_s, enroot_size = mksquashfs("-comp", "lzo", "-noD", "-all-root")
    # image in, file out: the anchors unpack the layers into a directory first (umoci is the unpacker apptainer
    # uses; enroot untars each layer), then run mksquashfs as timed above on the same files. Both sides read the
    # same OCI layout, with gzip layers as a registry serves them.
    layout = work / "layout"
    sh("skopeo", "copy", "-q", f"docker-archive:{archive}", f"oci:{layout}:bench")
    unpack_s = min(umoci_unpack(layout, work) for _ in range(2))
    oci_s = {target: min(convert(f"oci:{layout}:bench", target, store=Store(work / f"store-oci-{target}-{n}")).seconds
                         for n in range(2)) for target in ("sif", "sqsh")}
    daemon = convert(f"docker-daemon:{big_ref}", "sqsh", store=Store(work / "store-daemon"))
    shutil.rmtree(rootfs)
    return _anchor_results(best, f"big image, {mb:.0f} MB of files", sizes={"sqsh": sqsh_size, "sif": sif_size,
                           "apptainer": apptainer_size, "enroot": enroot_size},
                           anchors={"apptainer": apptainer_s, "enroot": enroot_s, "unpack": unpack_s}, oci_s=oci_s,
                           daemon_s=daemon.seconds)


def _anchor_results(best: dict[str, float], size: str, *, sizes: dict[str, int], anchors: dict[str, float],
                    oci_s: dict[str, float], daemon_s: float) -> list[BenchResult]:
    """The ratios of :func:`_raw_and_anchors`' measurements."""
    sqsh_s, sif_s = best["sqsh"], best["sif"]
    apptainer_s, enroot_s, unpack_s = anchors["apptainer"], anchors["enroot"], anchors["unpack"]
    sqsh_size, sif_size, apptainer_size, enroot_size = sizes["sqsh"], sizes["sif"], sizes["apptainer"], sizes["enroot"]
    return [
        *(BenchResult(f"ckit sqsh zstd:{level} / raw mksquashfs zstd:{level} (time)",
                      best[f"ckit-{level}"] / best[f"mksquashfs-{level}"], target="<= 1.2",
                      detail=f"{best[f'ckit-{level}']:.2f} s vs {best[f'mksquashfs-{level}']:.2f} s on the "
                             f"pre-flattened rootfs dir; {size}; best of {REPEAT}") for level in (1, 3)),
        # tar2sqfs starts from a tar that is already merged: ckit also reads and merges the layers (pass 1)
        *(BenchResult(f"ckit sqsh zstd:{level} / raw tar2sqfs zstd:{level} (time)",
                      best[f"ckit-{level}"] / best[f"tar2sqfs-{level}"],
                      detail=f"{best[f'ckit-{level}']:.2f} s vs {best[f'tar2sqfs-{level}']:.2f} s on the pre-flattened "
                             "tar (no layers to merge)") for level in (1, 3)),
        BenchResult("apptainer anchor gzip-9 / ckit sif default (speed, squashfs step)", apptainer_s / sif_s, target=">= 8",
                    detail=f"mksquashfs -comp gzip {apptainer_s:.1f} s vs ckit sif {sif_s:.2f} s"),
        BenchResult("ckit sif / apptainer anchor (size)", sif_size / apptainer_size, target="<= 1.25",
                    detail=f"{sif_size / 1e6:.1f} MB vs {apptainer_size / 1e6:.1f} MB"),
        BenchResult("enroot anchor lzo -noD / ckit sqsh default (speed, squashfs step)", enroot_s / sqsh_s, target=">= 8",
                    detail=f"mksquashfs -comp lzo -noD {enroot_s:.2f} s vs ckit sqsh zstd:-3 {sqsh_s:.2f} s"),
        BenchResult("apptainer pipeline / ckit sif, OCI layout in (speed)", (unpack_s + apptainer_s) / oci_s["sif"],
                    target=">= 8", detail=f"umoci unpack {unpack_s:.1f} s + mksquashfs gzip-9 {apptainer_s:.1f} s vs "
                                          f"ckit {oci_s['sif']:.2f} s (gunzips the same layers)"),
        BenchResult("enroot pipeline / ckit sqsh, OCI layout in (speed)", (unpack_s + enroot_s) / oci_s["sqsh"],
                    target=">= 8", detail=f"unpack {unpack_s:.1f} s + mksquashfs lzo -noD {enroot_s:.1f} s vs "
                                          f"ckit {oci_s['sqsh']:.2f} s"),
        BenchResult("ckit sqsh / enroot anchor (size)", sqsh_size / enroot_size, target="<= 1.25",
                    detail=f"{sqsh_size / 1e6:.1f} MB vs {enroot_size / 1e6:.1f} MB (lzo -noD leaves data raw)"),
        BenchResult("ckit sqsh from docker-daemon (layers read from podman's storage)", daemon_s, unit="s",
                    detail=f"vs {sqsh_s:.2f} s from a docker-archive on disk"),
    ]


def _memory_and_cache(archives: dict[str, Path], work: Path) -> list[BenchResult]:
    results = []
    rss: dict[str, float] = {}
    for name, archive in archives.items():
        env = {**os.environ, "CKIT_CACHE_DIR": str(work / f"cache-{name}")}
        argv = ckit_cli("convert", f"docker-archive:{archive}", "--to", "sqsh", "--json")
        rss[name], wall = peak_rss_mb(argv, env)
        size = archive.stat().st_size / 1e6
        results.append(BenchResult(f"peak RSS, {name} image ({size:.0f} MB archive)", rss[name], unit="MB",
                                   detail=f"ckit process tree; CLI wall {wall:.1f} s"))
        if name == "big":
            began = time.monotonic()
            subprocess.run(argv, env=env, check=True, capture_output=True)  # noqa: S603
            hit_cli = time.monotonic() - began
            store = Store(work / f"cache-{name}")
            hit = convert(f"docker-archive:{archive}", "sqsh", store=store)
            results.append(BenchResult("cache hit, library call", hit.seconds, unit="s", target="< 1",
                                       detail=f"cache_hit={hit.cache_hit}"))
            results.append(BenchResult("cache hit, `ckit convert` CLI wall", hit_cli, unit="s",
                                       detail="includes Python start-up and imports"))
    results.append(BenchResult("peak RSS huge / small", rss["huge"] / rss["small"], target="<= 1.5",
                               detail="streaming: memory does not grow with the image"))
    return results
