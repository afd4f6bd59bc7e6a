"""An edit to the job's code without a new image: ``ckit launch --code`` (``python -m tests.bench code``).

A code folder of 10,000 files and 100 MB (100 packages of 100 modules of 10 kB) is packed as ``--code`` packs it
(:func:`buildkit.launch.code.scan` when the launch is planned, :func:`~buildkit.launch.code.pack` when the job is
written): the first time, and after a one-line edit of one module (the user's loop: most files unchanged). The
baselines, in the same run on the same files: ``cp -a`` of the whole folder (what a user would otherwise copy
beside the job) and ``mksquashfs`` of it (a small squashfs, the other form the code could ship in).

Then the whole command a user runs after the edit, ``ckit launch --code DIR --no-submit`` (Python's start, the
plan, the copy and the script written: a launchable job), timed as a process, against ``ckit launch
--no-submit`` of the same job without ``--code`` (what the launch costs anyway). Target: at most 1 s of ckit's
work for the code folder (the packing after an edit). Medians of 5.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from buildkit.launch import code
from tests.bench import BenchResult, sh

FILES, SIZE = 10_000, 10_000  # 100 MB
TRIALS = 5
CKIT = [sys.executable, "-m", "buildkit.cli"]


def _folder(root: Path) -> Path:
    folder = root / "app"
    for n in range(FILES):
        path = folder / f"pkg{n // 100:03d}" / f"mod{n:05d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(SIZE))
    then = time.time() - 60  # written a minute ago, as a project's files are (older than the index's racy window)
    for path in folder.rglob("*.py"):
        os.utime(path, (then, then))
    return folder


def _timed(work) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def _edit(folder: Path, n: int) -> None:
    path = folder / "pkg000/mod00000.py"
    path.write_bytes(path.read_bytes() + f"# edit {n} {time.time_ns()}\n".encode())


def _pack(folder: Path, submit: Path, index: Path) -> None:
    code.pack(code.scan(folder, "/workspace/app", index), submit, index)


def _launch(folder: Path | None, submit: Path, env: dict[str, str]) -> float:
    argv = [*CKIT, "-q", "launch", "--site", "local", "--runtime", "podman", "--image", "localhost/app:1",
            "--no-submit", *(["--code", f"{folder}:/workspace/app"] if folder else []), "--", "python3", "main.py"]
    started = time.perf_counter()
    subprocess.run(argv, check=True, cwd=submit, env=env, stdout=subprocess.DEVNULL)  # noqa: S603
    return time.perf_counter() - started


def run() -> list[BenchResult]:
    with tempfile.TemporaryDirectory(prefix="ckit-bench-code-") as tmp:
        root = Path(tmp)
        folder, submit, index = _folder(root), root / "submit", root / "index"
        submit.mkdir()
        copies = [_timed(lambda n=n: sh("cp", "-a", str(folder), str(root / f"cp{n}"))) for n in range(TRIALS)]
        squashed = [_timed(lambda n=n: sh("mksquashfs", str(folder), str(root / f"sq{n}.sqsh"), "-quiet",
                                          "-no-progress")) for n in range(TRIALS)]
        first = _timed(lambda: _pack(folder, submit, index))
        edits = []
        for n in range(TRIALS):
            _edit(folder, n)
            edits.append(_timed(lambda: _pack(folder, submit, index)))
        env = {**os.environ, "CKIT_CACHE_DIR": str(index.parent / "cache")}
        bare, shipped = [], []
        for n in range(TRIALS):  # in pairs: both see the same load
            bare.append(_launch(None, submit, env))
            _edit(folder, TRIALS + n)
            shipped.append(_launch(folder, submit, env))
        kept = sum(1 for p in (submit / code.FOLDER).iterdir() if p.name != "objects")
    cp, sq, edit = statistics.median(copies), statistics.median(squashed), statistics.median(edits)
    launch, without = statistics.median(shipped), statistics.median(bare)
    size = f"{FILES} files, {FILES * SIZE / 1e6:.0f} MB"
    return [
        BenchResult("--code: pack after a one-line edit", edit, "s", "<= 1",
                    f"{size}; scan + copy (one file new, the rest linked); median of {TRIALS}"),
        BenchResult("--code: pack after an edit / cp -a of the folder", edit / cp, "x", "",
                    f"pack {edit:.2f} s, cp -a {cp:.2f} s (medians)"),
        BenchResult("--code: first pack / cp -a of the folder", first / cp, "x", "",
                    f"first pack {first:.2f} s (every file read and copied), cp -a {cp:.2f} s, mksquashfs {sq:.2f} s"),
        BenchResult("edit -> launchable job: ckit launch --code --no-submit", launch, "s", "",
                    f"whole command after the edit, Python's start included; without --code {without:.2f} s "
                    f"(medians of {TRIALS}); {kept} copies kept, unchanged files shared"),
        BenchResult("ckit launch --code / ckit launch (same job)", launch / without, "x", "",
                    "what --code adds to a launch"),
    ]
