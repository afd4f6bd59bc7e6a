"""Cache hit of ``ckit build`` (same inputs twice): the second run must do no build or conversion work.

Measured three ways on the `demo` stack (Debian base, ~170 MB image) against the real podman service:
the library call (prepare + execute), the whole ``ckit build`` command (Python start included), and the
same with ``--to image,sif,sqsh`` (the conversions hit the artifact store). The engine start is the podman
service's ``/_ping``, reported on its own.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from buildkit import process
from tests.bench import BenchResult
from tests.infra import components

REPO = Path(__file__).resolve().parents[2]
CKIT = [sys.executable, "-m", "buildkit.cli"]
TRIALS = 5


def _ckit(*argv: str, env: dict[str, str]) -> tuple[float, dict]:
    started = time.monotonic()
    done = process.run([*CKIT, *argv, "--json"], env=env, cwd=REPO, step=f"ckit {argv[0]}")
    return time.monotonic() - started, json.loads(done.stdout)


def run() -> list[BenchResult]:
    components.start(["podman", "debian"])
    env = components.get("podman").env()
    os.environ.update(env)
    with tempfile.TemporaryDirectory(prefix="ckit-bench-build-") as tmp:
        env["CKIT_CACHE_DIR"] = os.environ["CKIT_CACHE_DIR"] = str(Path(tmp) / "cache")
        out = str(Path(tmp) / "out")
        cold, first = _ckit("build", "demo", "--to", "image,sif,sqsh", "-o", out, env=env)

        from buildkit.daemon import connect
        from buildkit.orchestration import build as builder

        pings = []
        for _ in range(TRIALS):
            started = time.monotonic()
            connect()
            pings.append(time.monotonic() - started)
        library = []
        for _ in range(TRIALS):
            started = time.monotonic()
            prepared = builder.prepare("demo")
            result = builder.execute(prepared.plan, prepared.engine, prepared.context, lambda event: None,
                                     cached=prepared.cached)
            library.append(time.monotonic() - started)
            assert result.artifacts[0].cache_hit, "second build was not a cache hit"
        image_only = [_ckit("build", "demo", env=env) for _ in range(TRIALS)]
        converted = [_ckit("build", "demo", "--to", "image,sif,sqsh", "-o", out, env=env) for _ in range(TRIALS)]
    for _, summary in image_only + converted:
        assert all(a["cache_hit"] for a in summary["artifacts"]), summary
    first_build = next(a for a in first["artifacts"] if a["kind"] == "image")
    detail = f"median of {TRIALS}; first run {cold:.1f} s (image {'cached' if first_build['cache_hit'] else 'built'})"
    return [
        BenchResult("engine start: podman /_ping + client", statistics.median(pings), "s", "", f"median of {TRIALS}"),
        BenchResult("cache hit: prepare+execute (library)", statistics.median(library), "s", "< 1", detail),
        BenchResult("cache hit: `ckit build demo` (whole command)", statistics.median(s for s, _ in image_only), "s",
                    "< 3", "includes Python start and imports; " + detail),
        BenchResult("cache hit: `ckit build demo --to image,sif,sqsh`", statistics.median(s for s, _ in converted),
                    "s", "< 3", "conversions served by the store; " + detail),
    ]
