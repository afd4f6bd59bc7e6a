"""The first step of a job, cold, through each way a node can start an image (``python -m tests.bench first_step``).

Like with like: every side starts from an empty page cache (``sync; echo 3 > /proc/sys/vm/drop_caches`` before it
is mounted), the same image, on the same machine, without Pyxis. The image is bench_stream's ``torch`` (Debian 12
with Debian's python3-torch and python3-numpy), converted by ``ckit convert`` at ``lz4:1`` and at ckit's default
``zstd:-3``, and each ``.sqsh`` mounted by Debian's ``squashfuse``, ``squashfuse_ll`` and the kernel's squashfs; the
baseline is the same image unpacked (``unsquashfs``) on the same disk. On each: ``ch-run`` of ``python3 -c 'import
torch; torch.ones(1)'`` (a job's first step), and reading every file (``find -type f -exec cat``). Targets: the
import at most 1.5x the unpacked tree, reading everything at most 2x. Medians of REPEAT (env
``CKIT_BENCH_REPEAT``, default 3). Needs root (the page cache, the kernel mount).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.bench import BenchResult, sh
from tests.bench.bench_convert import ckit_cli
from tests.bench.bench_stream import build
from tests.infra import components

REPEAT = int(os.environ.get("CKIT_BENCH_REPEAT", "3"))
FIRST = ["python3", "-c", "import torch; torch.ones(1)"]
MOUNTS = ("squashfuse", "squashfuse_ll", "kernel")


def _drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


@contextlib.contextmanager
def _mounted(how: str, sqsh: Path, at: Path) -> Iterator[Path]:
    at.mkdir(exist_ok=True)
    if how == "kernel":
        sh("mount", "-t", "squashfs", "-o", "loop,ro", str(sqsh), str(at))
    else:
        sh(how, str(sqsh), str(at))
    try:
        yield at
    finally:
        sh("umount", str(at))


def _timed(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # noqa: S603
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode(errors='replace')[-800:]}")
    return time.perf_counter() - started


def _cold(how: str, sqsh: Path | None, tree: Path, at: Path, argv_of) -> float:  # type: ignore[no-untyped-def]
    """Seconds of ``argv_of(root)`` from an empty page cache, the image mounted after the caches were dropped."""
    _drop_caches()
    if sqsh is None:
        return _timed(argv_of(tree))
    with _mounted(how, sqsh, at) as root:
        return _timed(argv_of(root))


def _import(root: Path) -> list[str]:
    # ch-run refuses to start without USER, which a bench's environment may lack
    return ["env", f"USER={os.environ.get('USER') or 'root'}", "ch-run", str(root), "--", *FIRST]


def _read(root: Path) -> list[str]:
    return ["find", str(root), "-type", "f", "-exec", "cat", "{}", "+"]


def run() -> list[BenchResult]:
    components.start(["podman", "debian", "charliecloud"])
    os.environ.update(components.get("podman").env())
    results: list[BenchResult] = []
    with tempfile.TemporaryDirectory(prefix="ckit-bench-first-", dir="/var/tmp") as tmp:
        work = Path(tmp)
        ref = build("torch", work)
        files = {}
        for codec in ("lz4:1", "zstd:-3"):
            out = work / f"torch-{codec.split(':')[0]}.sqsh"
            sh(*ckit_cli("convert", f"docker-daemon:{ref}", "--to", "sqsh", "--compress", codec, "-o", str(out)))
            files[codec] = out
        tree = work / "tree"
        sh("unsquashfs", "-q", "-d", str(tree), str(files["lz4:1"]))
        at = work / "mnt"
        base = {what: statistics.median(_cold("", None, tree, at, argv) for _ in range(REPEAT))
                for what, argv in (("import", _import), ("read", _read))}
        for codec, sqsh in files.items():
            for how in MOUNTS:
                for what, argv, target in (("import", _import, "<= 1.5"), ("read", _read, "<= 2")):
                    seconds = statistics.median(_cold(how, sqsh, tree, at, argv) for _ in range(REPEAT))
                    label = "python3 -c 'import torch; torch.ones(1)'" if what == "import" else "reading every file"
                    results.append(BenchResult(
                        f"cold {label}: {how} ({codec}) / unpacked tree", seconds / base[what], "x", target,
                        f"{seconds:.2f} s against {base[what]:.2f} s; {sqsh.stat().st_size / 1e6:.0f} MB .sqsh; "
                        f"median of {REPEAT}"))
    return results
