"""Registry throughput: ``ckit push``/``ckit pull`` of a ~300 MB artifact on loopback against ``skopeo copy``
of a blob of the same size, measured in the same run, plus the bytes a repeat push uploads (target 0).

The payload is random data wrapped in gzip (level 1) so that skopeo sends it as it is instead of
compressing it; ckit pushes the same OCI layout (``oci:``), and a SIF of the same size as an ORAS artifact.
Each push goes to a new repository with a payload made in this run, so no side has the blob already.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from tests.bench import BenchResult
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
            return _measure(Path(tmp), registry.host)
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
