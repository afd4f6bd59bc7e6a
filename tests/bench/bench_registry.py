"""Registry throughput: ``ckit push``/``ckit pull`` on loopback against ``skopeo copy``, measured in the same run.

* **Image from a docker-archive** (~340 MB: the Debian minbase rootfs plus ``/usr/lib/gcc`` and
  ``/usr/lib/python3.11`` as a second layer, real files): both tools read the same archive and gzip its plain
  layers on the way up. Compared: bytes uploaded (ckit's / skopeo's, target <= 1.05) and time (target <= 1.2);
  then the bytes a repeat push of the same archive sends (target 0). Each round appends a small random file to
  every layer, so the layers are new to both tools and to the registry (no cache of either side helps).
* **A 300 MB pre-compressed layer** (random data in gzip level 1, which neither tool recompresses) in an OCI
  layout, and a SIF of the same size as an ORAS artifact: push and pull times.

Each push goes to a new repository of a registry of the bench's own.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

from tests.bench import BenchResult
from tests.infra.daemon import run_dir
from tests.infra.images import DebianImage
from tests.infra.registry import Registry

SIZE = 300 * 1024 * 1024
CKIT = str(Path(sys.executable).parent / "ckit")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, capture_output=True, text=True)  # noqa: S603


def _timed(*argv: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Wall time of one command, started with no dirty pages left by the previous one (the registry writes
    every blob to disk: an unflushed 300 MB from the run before would slow whichever side comes next)."""
    os.sync()
    began = time.monotonic()
    done = _run(*argv)
    return time.monotonic() - began, done


def _blob(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def make_layout(layout: Path, payload: bytes) -> None:
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    config = _blob(layout, json.dumps({"architecture": "amd64", "os": "linux",
                                       "rootfs": {"type": "layers", "diff_ids": []}}).encode())
    layer = _blob(layout, payload)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **layer}]})
    top = _blob(layout, manifest.encode())
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", **top,
         "annotations": {"org.opencontainers.image.ref.name": "bench"}}]}))


def make_sif(path: Path, size: int) -> None:
    header = bytearray(32176)
    header[32:42] = b"SIF_MAGIC\x00"
    header[42:45] = b"01\x00"
    with path.open("wb") as out:
        out.write(header)
        remaining = size - len(header)
        while remaining > 0:
            chunk = os.urandom(min(remaining, 16 << 20))
            out.write(chunk)
            remaining -= len(chunk)


class BenchRegistry(Registry):
    """A registry of its own (127.0.0.1:5020), so that test runs using the shared ones cannot disturb it."""

    name = "registry-bench"
    port = 5020


def run() -> list[BenchResult]:
    registry = BenchRegistry()
    started = registry.start()
    try:
        with tempfile.TemporaryDirectory(prefix="ckit-bench-registry-") as tmp:
            os.environ["CKIT_CACHE_DIR"] = str(Path(tmp) / "cache")  # no digest remembered from earlier runs
            return _measure_archive(Path(tmp), registry.host) + _measure(Path(tmp), registry.host)
    finally:
        if started:
            registry.stop()
            shutil.rmtree(registry.home, ignore_errors=True)  # ~1 GB of benchmark blobs


ROUNDS = 3  # the machine is shared: each figure is the best of ROUNDS, each round with fresh payloads


def _round(work: Path, host: str, n: int) -> dict[str, float]:
    run_id = f"{uuid.uuid4().hex[:8]}-{n}"
    layout = work / f"layout-{n}"
    payload = gzip.compress(os.urandom(SIZE), compresslevel=1)
    size = len(payload)
    make_layout(layout, payload)
    del payload
    sif = work / f"bench-{n}.sif"
    make_sif(sif, SIZE)
    times = {"mb": size / 1e6, "sif_mb": sif.stat().st_size / 1e6}
    def skopeo_push() -> None:
        times["skopeo_push"], _ = _timed("skopeo", "copy", "-q", "--dest-tls-verify=false", f"oci:{layout}:bench",
                                         f"docker://{host}/bench-{run_id}/skopeo:1")

    if n % 2 == 0:  # the order alternates between rounds
        skopeo_push()
    times["ckit_push"], done = _timed(CKIT, "-q", "push", f"oci:{layout}:bench", f"{host}/bench-{run_id}/ckit:1",
                                      "--json")
    if n % 2 == 1:
        skopeo_push()
    if json.loads(done.stdout)["uploaded_bytes"] < size:
        raise RuntimeError("ckit push did not upload the whole layer: the comparison would be unfair")
    times["sif_push"], _ = _timed(CKIT, "-q", "push", str(sif), f"{host}/bench-{run_id}/sif:1")
    _, again = _timed(CKIT, "-q", "push", str(sif), f"{host}/bench-{run_id}/sif:1", "--json")
    times["repeat_bytes"] = json.loads(again.stdout)["uploaded_bytes"]
    times["skopeo_pull"], _ = _timed("skopeo", "copy", "-q", "--src-tls-verify=false",
                                     f"docker://{host}/bench-{run_id}/skopeo:1", f"oci:{work / f'pulled-{n}'}:bench")
    times["ckit_pull"], _ = _timed(CKIT, "-q", "pull", f"{host}/bench-{run_id}/sif:1", "-o",
                                   str(work / f"ckit-pulled-{n}"))
    for path in (layout, work / f"pulled-{n}", work / f"ckit-pulled-{n}"):
        shutil.rmtree(path)
    sif.unlink()
    return times


def _measure(work: Path, host: str) -> list[BenchResult]:
    rounds = [_round(work, host, n) for n in range(ROUNDS)]

    def best(key: str) -> float:
        return min(r[key] for r in rounds)

    mb, sif_mb = rounds[0]["mb"], rounds[0]["sif_mb"]

    def rate(seconds: float, size_mb: float) -> str:
        return f"{size_mb / seconds:.0f} MB/s ({seconds:.2f} s)"

    skopeo_push, skopeo_pull = best("skopeo_push"), best("skopeo_pull")
    return [
        BenchResult("push time ckit oci: / skopeo copy (300 MB layer)", best("ckit_push") / skopeo_push, "x",
                    "<= 1.2", f"ckit {rate(best('ckit_push'), mb)}, skopeo {rate(skopeo_push, mb)}"),
        BenchResult("push time ckit .sif / skopeo copy (300 MB)", (best("sif_push") / sif_mb) / (skopeo_push / mb),
                    "x", "<= 1.2", f"ckit {rate(best('sif_push'), sif_mb)} hashed as it is sent, per MB"),
        BenchResult("pull time ckit .sif / skopeo copy (300 MB)", (best("ckit_pull") / sif_mb) / (skopeo_pull / mb),
                    "x", "<= 1.2", f"ckit {rate(best('ckit_pull'), sif_mb)}, skopeo {rate(skopeo_pull, mb)}"),
        BenchResult("bytes uploaded by a repeat push", max(r["repeat_bytes"] for r in rounds), "B", "<= 0",
                    "same .sif, same tag"),
    ]


# -- an image from a docker-archive ----------------------------------------------------------------------------
EXTRA_DIRS = ("/usr/lib/gcc", "/usr/lib/python3.11")


def _base_layers(work: Path) -> list[Path]:
    """The two layer tars every round starts from: Debian's rootfs, and the extra folders (real files)."""
    debian = DebianImage(run_dir())
    if not debian.tarball.is_file():
        debian.build_tarball()
    extra = work / "extra-layer.tar"
    with tarfile.open(extra, "w", format=tarfile.PAX_FORMAT) as tar:
        for folder in EXTRA_DIRS:
            tar.add(folder, arcname=folder.lstrip("/"))
    return [debian.tarball, extra]


def _with_fresh_file(layer: Path, out: Path) -> str:
    """``layer`` plus one random file at its end (copied as bytes, no repacking); returns the new diff_id."""
    with tarfile.open(layer) as tar:
        end = 0
        for member in tar:
            end = member.offset_data + -(-member.size // 512) * 512
    info = tarfile.TarInfo(f"bench-{uuid.uuid4().hex}")
    data = os.urandom(64)
    info.size = len(data)
    h = hashlib.sha256()
    with layer.open("rb") as src, out.open("wb") as dst:
        left = end
        while left:
            chunk = src.read(min(left, 16 << 20))
            left -= len(chunk)
            h.update(chunk)
            dst.write(chunk)
        for part in (info.tobuf(tarfile.PAX_FORMAT), data + bytes(512 - len(data)), bytes(1024)):
            h.update(part)
            dst.write(part)
    return "sha256:" + h.hexdigest()


def make_archive(base: list[Path], work: Path, n: int) -> Path:
    """A `docker save`-shaped archive of the base layers, each with a fresh file (new diff_ids every round)."""
    layers = [work / f"layer-{n}-{i}.tar" for i in range(len(base))]
    diff_ids = [_with_fresh_file(src, dst) for src, dst in zip(base, layers, strict=True)]
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/bash"]},
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    archive = work / f"image-{n}.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in (("config.json", config), ("manifest.json", json.dumps(
                [{"Config": "config.json", "RepoTags": [f"bench:{n}"],
                  "Layers": [p.name for p in layers]}]).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for path in layers:
            tar.add(path, arcname=path.name)
            path.unlink()
    return archive


def _pushed_bytes(host: str, repo: str) -> int:
    raw = json.loads(_run("skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{host}/{repo}:1").stdout)
    return raw["config"]["size"] + sum(x["size"] for x in raw["layers"])


def _archive_round(work: Path, host: str, base: list[Path], n: int) -> dict[str, float]:
    archive = make_archive(base, work, n)
    run_id = f"{uuid.uuid4().hex[:8]}-{n}"
    times = {"mb": archive.stat().st_size / 1e6}

    def skopeo() -> None:
        times["skopeo"], _ = _timed("skopeo", "copy", "-q", "--dest-tls-verify=false", f"docker-archive:{archive}",
                                    f"docker://{host}/archive-{run_id}/skopeo:1")

    if n % 2 == 0:
        skopeo()
    times["ckit"], done = _timed(CKIT, "-q", "push", f"docker-archive:{archive}",
                                 f"{host}/archive-{run_id}/ckit:1", "--json")
    if n % 2 == 1:
        skopeo()
    times["ckit_bytes"] = json.loads(done.stdout)["uploaded_bytes"]
    times["skopeo_bytes"] = _pushed_bytes(host, f"archive-{run_id}/skopeo")
    _, again = _timed(CKIT, "-q", "push", f"docker-archive:{archive}", f"{host}/archive-{run_id}/ckit:1", "--json")
    times["repeat_bytes"] = json.loads(again.stdout)["uploaded_bytes"]
    archive.unlink()
    return times


def _measure_archive(work: Path, host: str) -> list[BenchResult]:
    base = _base_layers(work)
    rounds = [_archive_round(work, host, base, n) for n in range(ROUNDS)]
    ckit_s, skopeo_s = min(r["ckit"] for r in rounds), min(r["skopeo"] for r in rounds)
    ratio = max(r["ckit_bytes"] / r["skopeo_bytes"] for r in rounds)
    mb = rounds[0]["mb"]
    return [
        BenchResult(f"push time ckit / skopeo, docker-archive ({mb:.0f} MB image)", ckit_s / skopeo_s, "x",
                    "<= 1.2", f"ckit {ckit_s:.2f} s, skopeo {skopeo_s:.2f} s (best of {ROUNDS})"),
        BenchResult("bytes uploaded ckit / skopeo, same docker-archive", ratio, "x", "<= 1.05",
                    f"ckit {rounds[0]['ckit_bytes'] / 1e6:.1f} MB, skopeo {rounds[0]['skopeo_bytes'] / 1e6:.1f} MB"),
        BenchResult("bytes uploaded by a repeat push of the docker-archive",
                    max(r["repeat_bytes"] for r in rounds), "B", "<= 0", "same archive, same tag"),
    ]
