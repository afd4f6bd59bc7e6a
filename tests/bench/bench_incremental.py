"""Reconverting after a change of the top layer; directory lookups in ckit's images; conversion from the engine.

The data (:mod:`.incremental_image`, built once, cached in ``~/.cache/ckit-bench``): a Debian bookworm root made
by ``mmdebstrap`` with compilers, LLVM, Java, Rust and the Python science stack, split into five layers by path,
and PyTorch's CPU wheel (``CKIT_BENCH_WHEEL``, default the one in ``/opt/wheels``) unpacked as a sixth: about 3 GB
of real files, shaped like a deep-learning base image. On top, a layer of 50 MB of real files (``a``), and the
same layer with every tenth file changed and one added (``b``); an OCI layout with uncompressed layers and two tags.

1. Reconversion: convert ``a``, then time ``b`` in the same store, against a cold conversion of ``b``; the two
   outputs must be byte-identical (``SOURCE_DATE_EPOCH`` is set). The same from a registry of the benchmark's own
   (both tags pushed with gzip layers, as registries hold them), where the reconversion does not even download
   the base layers: the bytes each conversion fetched are counted by a hook on the registry reader.
2. Directory lookups, ckit's image against ``mksquashfs``'s image of the same tree (zstd:1 both), each freshly
   loop-mounted: ``stat`` of every entry of a 20,000-file directory, and ``python3 -c "import …"`` of the stdlib
   and numpy/scipy/pandas run in a chroot of the image (the image's own interpreter, libraries and packages:
   lookups in ``/usr/lib/x86_64-linux-gnu`` and ``dist-packages``).
3. ``ckit build demo --to sqsh`` with a cold store (the image is built; the conversion reads it from podman)
   against ``ckit convert docker-archive:`` of the same image, both through the CLI.

Every pair alternates, repeated; the value is the median ratio, the detail gives the range.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from buildkit.image.convert import convert
from buildkit.image.layers.flatten import as_layer_tars, flatten
from buildkit.image.squashfs.writer import write
from buildkit.storage.store import Store
from tests.bench import BenchResult, sh
from tests.bench.incremental_image import EPOCH, NOT_IN_PYTHON_TREE, layout, rootfs
from tests.infra import components
from tests.infra.registry import Registry

IMPORTS = ("json, email.mime.text, http.client, xml.etree.ElementTree, sqlite3, decimal, asyncio, argparse, unittest, "
           "logging.handlers, numpy, scipy.linalg, scipy.sparse, scipy.optimize, scipy.stats, scipy.signal, scipy.io, "
           "pandas")  # not matplotlib: it needs a writable folder, and the image is read-only
WIDE = 20_000
REPEAT = 3


def timed(fn: Callable[[], object]) -> float:
    began = time.monotonic()
    fn()
    return time.monotonic() - began


def ratio_result(name: str, num: list[float], den: list[float], target: str, what: str) -> BenchResult:
    ratios = sorted(n / d for n, d in zip(num, den, strict=True))
    return BenchResult(name, statistics.median(ratios), target=target,
                       detail=f"{what}; ratio {ratios[0]:.3f}–{ratios[-1]:.3f} over {len(ratios)} runs; "
                              f"{statistics.median(num):.2f} s vs {statistics.median(den):.2f} s (medians)")


# --- 1. reconversion ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def xfs(work: Path) -> Iterator[Path]:
    """A loop-mounted XFS with reflinks (RHEL's default file system): copies there share blocks."""
    image, where = work / "xfs.img", work / "xfs"
    with image.open("wb") as f:
        f.truncate(24 << 30)  # sparse
    sh("mkfs.xfs", "-q", "-m", "reflink=1", str(image))
    where.mkdir()
    sh("mount", "-o", "loop", str(image), str(where))
    try:
        yield where
    finally:
        sh("umount", str(where))
        image.unlink()


def reconversion(work: Path) -> list[BenchResult]:
    oci = layout()
    manifest = json.loads((oci / "index.json").read_text())["manifests"][1]
    layers = json.loads((oci / "blobs" / "sha256" / manifest["digest"].split(":")[1]).read_text())["layers"]
    about = f"{sum(layer['size'] for layer in layers) / 1e9:.1f} GB image, {len(layers)} layers"
    results = _reconversions(oci, work, "ext4 here", about)
    with xfs(work) as where:
        results += _reconversions(oci, where, "XFS with reflinks", about)
    return results


def _reconversions(oci: Path, work: Path, fs: str, about: str) -> list[BenchResult]:
    results = []
    for target, runs in (("sqsh", REPEAT), ("sif", 2)):
        snapshot = Store(work / f"snapshot-{target}")
        convert(f"oci:{oci}:a", target, store=snapshot)  # the earlier conversion, kept as it is for every run
        cold_s, warm_s, floor_s, same = [], [], [], True
        for n in range(runs):
            os.sync()  # each conversion starts without the previous one's writes still in flight
            cold = convert(f"oci:{oci}:b", target, store=Store(work / f"cold-{target}-{n}"))
            cold_s.append(cold.seconds)
            trial = work / f"warm-{target}-{n}"
            sh("cp", "-al", str(snapshot.root), str(trial))  # links: the artifacts are the same files
            os.sync()
            warm = convert(f"oci:{oci}:b", target, store=Store(trial))
            warm_s.append(warm.seconds)
            same = same and _digest(warm.path) == _digest(cold.path)
            floor_s.append(_floor(cold.path, work / "floor"))
            reused, compressed = warm.reused_bytes, warm.compressed_bytes
            shutil.rmtree(work / f"cold-{target}-{n}")
            shutil.rmtree(trial)
        shutil.rmtree(snapshot.root)
        results.append(ratio_result(f"reconvert after a top-layer change / cold, {target}, {fs}", warm_s, cold_s,
                                    "<= 0.15", f"{about}; output identical: {same}; {reused / 1e9:.2f} GB of files "
                                               f"copied, {compressed / 1e6:.0f} MB compressed"))
        results.append(ratio_result(f"floor: copy the {target} as the reconversion must, and sync it / cold, {fs}",
                                    floor_s, cold_s, "", "cp --reflink=auto + sync of the cold output: the bytes a "
                                                         "reconversion writes and makes durable before it publishes"))
        if not same:
            results.append(BenchResult(f"reconverted {target} equals the cold conversion ({fs})", 0, target=">= 1"))
    return results


def _floor(image: Path, copy: Path) -> float:
    """Seconds to copy ``image`` the way this file system copies (shared extents where it has reflinks, else
    every byte) and sync it: what no reconversion that publishes a durable new file can go below."""
    os.sync()
    seconds = timed(lambda: (sh("cp", "--reflink=auto", str(image), str(copy)), sh("sync", str(copy))))
    copy.unlink()
    return seconds


class IncrementalRegistry(Registry):
    """A registry of its own, so that test runs on the shared ones cannot disturb it."""

    name = "registry-bench-incremental"
    port = 5024


def _counting_reader(fetched: dict[str, int]):  # type: ignore[no-untyped-def]
    """The ``docker://`` reader of ``ckit convert``, with every blob byte fetched counted by digest."""
    from buildkit.image.sources.registry import RegistrySource
    from buildkit.registry.distribution.blobstream import blob_chunks
    from buildkit.registry.distribution.client import RegistryClient
    from buildkit.registry.distribution.reference import parse

    def chunks(client, repository, digest, size):  # type: ignore[no-untyped-def]
        for chunk in blob_chunks(client, repository, digest, size):
            fetched[digest] = fetched.get(digest, 0) + len(chunk)
            yield chunk

    def read(spec):  # type: ignore[no-untyped-def]
        ref = parse(spec.ref or "")
        return RegistrySource(spec.text, ref, lambda: RegistryClient.for_reference(ref, insecure=True), chunks)

    return read


def registry_reconversion(work: Path) -> list[BenchResult]:
    oci, registry = layout(), IncrementalRegistry()
    own = registry.start()
    try:
        repo = f"{registry.host}/ckit-bench/incremental"
        for tag in ("a", "b"):  # skopeo compresses the layout's plain tars with gzip on the way
            sh("skopeo", "copy", "-q", "--dest-tls-verify=false", f"oci:{oci}:{tag}", f"docker://{repo}:{tag}",
               timeout=3600)
        fetched: dict[str, int] = {}
        reader = _counting_reader(fetched)
        snapshot = Store(work / "snapshot-registry")
        convert(f"docker://{repo}:a", "sqsh", store=snapshot, registry=reader)
        cold_s, warm_s, same, got = [], [], True, {}
        for n in range(2):
            os.sync()
            fetched.clear()
            cold = convert(f"docker://{repo}:b", "sqsh", store=Store(work / f"cold-registry-{n}"), registry=reader)
            cold_s.append(cold.seconds)
            got["cold"] = (len(fetched), sum(fetched.values()))
            trial = work / f"warm-registry-{n}"
            sh("cp", "-al", str(snapshot.root), str(trial))
            os.sync()
            fetched.clear()
            warm = convert(f"docker://{repo}:b", "sqsh", store=Store(trial), registry=reader)
            warm_s.append(warm.seconds)
            got["warm"] = (len(fetched), sum(fetched.values()))
            same = same and _digest(warm.path) == _digest(cold.path)
            shutil.rmtree(work / f"cold-registry-{n}")
            shutil.rmtree(trial)
        shutil.rmtree(snapshot.root)
    finally:
        if own:
            registry.stop()
            shutil.rmtree(registry.home, ignore_errors=True)
    (warm_blobs, warm_bytes), (cold_blobs, cold_bytes) = got["warm"], got["cold"]
    results = [ratio_result("reconvert from the registry after a top-layer change / cold from the registry, sqsh",
                            warm_s, cold_s, "<= 0.15",
                            f"gzip layers; output identical: {same}; downloaded {warm_blobs} blob(s), "
                            f"{warm_bytes / 1e6:.0f} MB, against {cold_blobs} blobs, {cold_bytes / 1e6:.0f} MB")]
    if not same:
        results.append(BenchResult("reconverted from the registry equals the cold conversion", 0, target=">= 1"))
    return results


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --- 2. directory lookups ---------------------------------------------------------------------------------------
def _images(tar: Path, work: Path, name: str) -> tuple[Path, Path]:
    """ckit's image of a layer tar and mksquashfs's image of the same tree unpacked, both zstd:1."""
    ours, theirs, tree = work / f"{name}-ckit.sqsh", work / f"{name}-mksquashfs.sqsh", work / f"{name}-tree"
    write(flatten(as_layer_tars([tar]), mtime=int(EPOCH)), ours, "zstd", 1, mkfs_time=int(EPOCH))
    tree.mkdir()
    sh("tar", "-C", str(tree), "--numeric-owner", "-xpf", str(tar))
    sh("mksquashfs", str(tree), str(theirs), "-noappend", "-quiet", "-no-progress", "-comp", "zstd",
       "-Xcompression-level", "1")
    shutil.rmtree(tree)
    return ours, theirs


def _mounted(image: Path, where: Path, run: Callable[[Path], object]) -> float:
    """CPU seconds (this process and its children, user + system: lookups are kernel work) that ``run`` takes on
    a fresh loop mount of ``image`` (squashfs's caches start empty). CPU time, unlike wall time, hardly moves
    when other jobs share the machine."""
    where.mkdir(exist_ok=True)
    sh("mount", "-t", "squashfs", "-o", "loop,ro", str(image), str(where))
    try:
        before = _cpu()
        run(where)
        return _cpu() - before
    finally:
        sh("umount", str(where))


def _cpu() -> float:
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _wide_tar(path: Path) -> Path:
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("lib")
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
        for n in range(WIDE):
            data = f"{n}\n".encode()
            info = tarfile.TarInfo(f"lib/lib{n * 7919 % WIDE:05d}-{'abcdefgh'[n % 8] * (n % 23)}.so.{n % 9}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def lookups(work: Path) -> list[BenchResult]:
    wide = _images(_wide_tar(work / "wide.tar"), work, "wide")

    def stat_all(where: Path, shuffled: bool) -> None:
        names = sorted(os.listdir(where / "lib"))
        if shuffled:  # a fixed pseudo-random order, as imports look names up: squashfs's block cache misses
            names.sort(key=lambda n: hashlib.md5(n.encode()).digest())  # noqa: S324
        for name in names:
            os.stat(where / "lib" / name)

    stats: dict[bool, list[list[float]]] = {False: [[], []], True: [[], []]}
    for shuffled in (False, True):
        for run in range(9):
            for n in (0, 1) if run % 2 == 0 else (1, 0):
                stats[shuffled][n].append(_mounted(wide[n], work / "mnt",
                                                   lambda where, shuffled=shuffled: stat_all(where, shuffled)))
    python = _images(_python_tar(work / "python.tar"), work, "python")

    def imports(where: Path) -> None:
        sh(shutil.which("chroot") or "/usr/sbin/chroot", str(where), "/usr/bin/python3", "-c", f"import {IMPORTS}",
           env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"})

    runs: list[list[float]] = [[], []]
    for _ in range(REPEAT + 2):
        for n, image in enumerate(python):
            runs[n].append(_mounted(image, work / "mnt", imports))
    return [*(ratio_result(f"stat of {WIDE} entries of one directory ({how}), kernel mount: ckit / mksquashfs",
                           *stats[shuffled], "<= 1.05", "CPU time; a fresh mount per run; every name looked up once")
              for shuffled, how in ((False, "in name order"), (True, "in random order"))),
            ratio_result("python3 -c 'import numpy, scipy, pandas, …' in a chroot: ckit / mksquashfs",
                         *runs, "<= 1.05", f"CPU time; {python[0].stat().st_size / 1e6:.0f} MB image of the Debian "
                                           "root with Python's science stack; a fresh mount per run")]


def _python_tar(path: Path) -> Path:
    """The bench root without the toolchains a Python import never touches (one layer)."""
    with tarfile.open(rootfs()) as tar, tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as out:
        for member in tar:
            if not member.name.removeprefix("./").startswith(NOT_IN_PYTHON_TREE):
                out.addfile(member, tar.extractfile(member) if member.isreg() else None)
    return path


# --- 3. from the engine ---------------------------------------------------------------------------------------
def from_engine(work: Path) -> list[BenchResult]:
    env = {**os.environ, "CKIT_CACHE_DIR": str(work / "engine-cache")}
    cli = [sys.executable, "-m", "buildkit.cli"]
    built = subprocess.run([*cli, "build", "demo", "--json"], env=env, check=True, capture_output=True)  # noqa: S603
    ref = json.loads(built.stdout)["artifacts"][0]["ref"]
    archive = work / "demo.tar"
    sh("podman", "save", "-o", str(archive), ref)
    engine_s, archive_s = [], []
    for n in range(REPEAT):
        for cache, argv, into in ((f"e{n}", [*cli, "build", "demo", "--to", "sqsh", "-o", str(work / f"out-e{n}")],
                                   engine_s),
                                  (f"a{n}", [*cli, "convert", f"docker-archive:{archive}", "--to", "sqsh"], archive_s)):
            run_env = {**env, "CKIT_CACHE_DIR": str(work / f"cache-{cache}")}
            into.append(timed(lambda argv=argv, run_env=run_env: subprocess.run(  # noqa: S603
                argv, env=run_env, check=True, capture_output=True)))
            shutil.rmtree(work / f"cache-{cache}", ignore_errors=True)
    mb = archive.stat().st_size / 1e6
    return [ratio_result("`ckit build demo --to sqsh` (cold conversion) / `ckit convert docker-archive:`", engine_s,
                         archive_s, "<= 1.3", f"{mb:.0f} MB image, CLI wall time (`ckit build`'s own start, "
                                              "image and artifact cache hits, costs no more than `ckit convert`'s: "
                                              "the rest is reading the layers from podman's storage)"),
            *_engine_library(work)]


def _engine_library(work: Path) -> list[BenchResult]:
    """The conversion alone, on the 349 MB image of bench_convert: from podman against from its archive."""
    from tests.bench.bench_convert import IMAGES, build_image, save

    ref = build_image("big", IMAGES["big"], work)
    archive = save(ref, work / "big.tar")
    engine_s, archive_s = [], []
    for _ in range(REPEAT):
        for source, into in ((f"docker-daemon:{ref}", engine_s), (f"docker-archive:{archive}", archive_s)):
            os.sync()
            store = Store(work / "lib-store")
            into.append(convert(source, "sqsh", store=store).seconds)
            shutil.rmtree(store.root)
    return [ratio_result("convert docker-daemon: / docker-archive: (library call, sqsh)", engine_s, archive_s, "",
                         f"{archive.stat().st_size / 1e6:.0f} MB image; the layers reassembled from podman's "
                         "storage, checked against the diff_ids")]


def run() -> list[BenchResult]:
    started = components.start(["podman", "debian"])
    os.environ.update(components.environment())
    os.environ["SOURCE_DATE_EPOCH"] = EPOCH
    work = Path(tempfile.mkdtemp(prefix="ckit-bench-incremental-"))
    try:
        return [*reconversion(work), *registry_reconversion(work), *lookups(work), *from_engine(work)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        components.stop([name for name, seconds in started.items() if seconds is not None])
