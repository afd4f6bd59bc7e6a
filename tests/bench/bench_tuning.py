"""What each speed mechanism buys (:mod:`buildkit.image.speed.tuning`): the same image converted with every
mechanism, plainly (``CKIT_PLAIN=1``), and with each one off in turn (``CKIT_PLAIN=NAME``).

The image is the ``big`` bench image (~350 MB, :mod:`tests.bench.bench_convert`) read from podman's storage
(``docker-daemon:``), whose layers stream as a registry's do, so every mechanism has work. Each run is a fresh
``ckit convert --to sqsh`` into a store of its own (no reuse), best of three, in its own process (so its peak RSS
is its own). A ratio is that run's over the tuned one: above 1 means the mechanism pays for itself; a mechanism
whose time and memory ratios stay at 1 run after run no longer pays and can go.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from buildkit.image.speed.tuning import Tuning
from tests.bench import BenchResult
from tests.bench.bench_convert import IMAGES, build_image, ckit_cli, peak_rss_mb
from tests.infra import components

REPEAT = 3


def convert_once(ref: str, work: Path, plain: str, n: int) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one cold conversion with ``CKIT_PLAIN=plain``."""
    store = work / f"store-{plain or 'tuned'}-{n}"
    env = {**os.environ, "CKIT_PLAIN": plain, "CKIT_CACHE_DIR": str(store)}
    try:
        rss, seconds = peak_rss_mb(ckit_cli("convert", f"docker-daemon:{ref}", "--to", "sqsh", "-o",
                                            str(work / "out.sqsh")), env)
    finally:
        shutil.rmtree(store, ignore_errors=True)
        (work / "out.sqsh").unlink(missing_ok=True)
    return seconds, rss


def best(ref: str, work: Path, plain: str) -> tuple[float, float]:
    runs = [convert_once(ref, work, plain, n) for n in range(REPEAT)]
    return min(s for s, _ in runs), min(r for _, r in runs)


def run() -> list[BenchResult]:
    started = components.start(["podman", "debian"])
    os.environ.update(components.environment())
    work = Path(tempfile.mkdtemp(prefix="ckit-bench-tuning-"))
    try:
        ref = build_image("big", IMAGES["big"], work)
        tuned_s, tuned_rss = best(ref, work, "")
        results = [BenchResult("tuned: seconds", tuned_s, unit="s"), BenchResult("tuned: peak RSS", tuned_rss, "MB")]
        for plain in ("1", *Tuning.names()):
            seconds, rss = best(ref, work, plain)
            what = "plain (CKIT_PLAIN=1)" if plain == "1" else f"without {plain}"
            results += [BenchResult(f"{what} / tuned (time)", seconds / tuned_s, detail=f"{seconds:.2f} s"),
                        BenchResult(f"{what} / tuned (peak RSS)", rss / tuned_rss, detail=f"{rss:.0f} MB")]
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)
        components.stop([name for name, seconds in started.items() if seconds is not None])
