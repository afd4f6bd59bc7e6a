"""What each speed mechanism buys (:mod:`buildkit.image.speed.tuning`): the same image converted with every
mechanism, plainly (``CKIT_PLAIN=1``), and with each one off in turn (``CKIT_PLAIN=NAME``).

The image is made here from this machine's files (the same files every run, no component to start): three
gzipped layers of ``/usr/lib/gcc``, ``/usr/lib/python3.11`` and ``/usr/share/doc`` (~300 MB of files), streamed to
the converter in 1 MiB chunks as a registry's layers arrive, so every mechanism has work. Each run is a fresh
conversion to ``.sqsh`` into a store of its own (no reuse), in a process of its own (its peak RSS is its own),
best of three rounds. A ratio is that run's over the tuned one: above 1, the mechanism pays for itself; one whose time
and memory ratios stay at 1 run after run no longer pays and can go.

    python -m tests.bench tuning
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from buildkit.image.sources.base import Identity, LayerBlob, Materialized, Source
from buildkit.image.speed.tuning import Tuning
from tests.bench import BenchResult
from tests.bench.bench_convert import peak_rss_mb

FOLDERS = ("/usr/lib/gcc", "/usr/lib/python3.11", "/usr/lib/python3")
REPEAT = 3
CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while data := f.read(CHUNK):
            h.update(data)
    return "sha256:" + h.hexdigest()


def build_image(work: Path) -> Path:
    """The layers (gzipped) and the config in ``work``; returns the config's path."""
    diff_ids = []
    for n, folder in enumerate(FOLDERS, start=1):
        tar = work / f"layer{n}.tar"
        with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as out:
            out.add(folder, arcname=folder.lstrip("/"), filter=lambda info: info if not info.isdev() else None)
        diff_ids.append(_sha256(tar))
        with tar.open("rb") as src, (work / f"layer{n}.tar.gz").open("wb") as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as dst:
            shutil.copyfileobj(src, dst, CHUNK)
        tar.unlink()
    config = work / "config.json"
    config.write_text(json.dumps({"architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z",
                                  "config": {"Env": ["PATH=/usr/bin:/bin"]},
                                  "rootfs": {"type": "layers", "diff_ids": diff_ids}}))
    return config


class StreamedFiles(Source):
    """The gzipped layers in ``work``, handed over in chunks as a registry's arrive."""

    def __init__(self, work: Path) -> None:
        self.work, self.text, self.image_ref = work, "docker://bench.invalid/tuning:1", "bench.invalid/tuning:1"
        self.config = (work / "config.json").read_bytes()

    def identify(self) -> Identity:
        return Identity(self.config, "sha256:" + hashlib.sha256(self.config).hexdigest())

    @staticmethod
    def _chunks(path: Path) -> Callable[[], Iterator[bytes]]:
        def chunks() -> Iterator[bytes]:
            with path.open("rb") as f:
                while data := f.read(CHUNK):
                    yield data
        return chunks

    def materialize(self, workdir: Path, progress: Callable[[int], None] | None = None) -> Materialized:
        layers = sorted(self.work.glob("layer*.tar.gz"))
        return Materialized(self.config, [
            LayerBlob(workdir / f"layer-{n}.tar", 0, path.stat().st_size, f"layer {n}", digest=_sha256(path),
                      chunks=self._chunks(path)) for n, path in enumerate(layers, start=1)])


def convert_once(work: Path, plain: str, n: int) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one cold conversion with ``CKIT_PLAIN=plain``, in a process of its own."""
    store = work / f"store-{plain or 'tuned'}-{n}"
    env = {**os.environ, "CKIT_PLAIN": plain}
    try:
        rss, seconds = peak_rss_mb([sys.executable, "-m", "tests.bench.bench_tuning", str(work), str(store)], env)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    return seconds, rss


def best(work: Path, settings: list[str]) -> dict[str, tuple[float, float]]:
    """Each setting's best time and peak RSS over :data:`REPEAT` rounds; a round runs every setting once, so a
    busy spell of the shared machine falls on all of them alike, not on the ones measured during it."""
    runs: dict[str, list[tuple[float, float]]] = {plain: [] for plain in settings}
    for n in range(REPEAT):
        for plain in settings:
            runs[plain].append(convert_once(work, plain, n))
    return {plain: (min(s for s, _ in got), min(r for _, r in got)) for plain, got in runs.items()}


def run() -> list[BenchResult]:
    work = Path(tempfile.mkdtemp(prefix="ckit-bench-tuning-"))
    try:
        build_image(work)
        measured = best(work, ["", "1", *Tuning.names()])
        tuned_s, tuned_rss = measured[""]
        results = [BenchResult("tuned: seconds", tuned_s, unit="s"),
                   BenchResult("tuned: peak RSS", tuned_rss, unit="MB")]
        for plain in ("1", *Tuning.names()):
            seconds, rss = measured[plain]
            what = "plain (CKIT_PLAIN=1)" if plain == "1" else f"without {plain}"
            results += [BenchResult(f"{what} / tuned (time)", seconds / tuned_s, detail=f"{seconds:.2f} s"),
                        BenchResult(f"{what} / tuned (peak RSS)", rss / tuned_rss, detail=f"{rss:.0f} MB")]
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":  # one conversion, in the process convert_once measures
    from buildkit.image.convert import convert
    from buildkit.storage.store import Store

    convert(StreamedFiles(Path(sys.argv[1])), "sqsh", store=Store(Path(sys.argv[2])))
