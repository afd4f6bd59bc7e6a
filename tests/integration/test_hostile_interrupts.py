"""Kills and interrupts at random moments (the seed is printed): never a traceback, never a partial file left.

* Ctrl-C at any moment of start-up, once the interpreter has started ckit's code: one line, exit 130.
* SIGKILL of ``ckit pull`` mid-download: nothing at the final path; the next pull of the same artifact, at once,
  succeeds and removes the ``.NAME.XXXX.part`` file the killed one could not.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.integration.hostile_registry import HostileServer, Reply, Seen
from tests.integration.registry_helpers import CKIT

SIF_LAYER = "application/vnd.sylabs.sif.layer.v1.sif"


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("CKIT_TEST_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"{name}: seed {seed} (CKIT_TEST_SEED={seed} repeats this run)")
    return random.Random(seed)


def _handler_line() -> int:
    """The line of buildkit/cli.py that installs ckit's start-up interrupt handler."""
    import buildkit.cli

    source = Path(buildkit.cli.__file__).read_text().splitlines()
    return next((n for n, line in enumerate(source, 1) if "_signal.signal(_signal.SIGINT, _interrupted" in line), 0)


def before_ckit(text: str, handler_line: int) -> bool:
    """The interrupt reached the interpreter before ckit could handle it: during its own start-up (it names no
    ckit file, e.g. "init_import_site"), or at the first lines of buildkit/cli.py, before the handler exists."""
    if "KeyboardInterrupt" not in text or "ckit: interrupted" in text:
        return False
    frames = re.findall(r'File "[^"]*/buildkit/([^"]+)", line (\d+), in <module>', text)
    return all(name in ("__init__.py", "cli.py") and int(line) < handler_line for name, line in frames) and \
        len(frames) == text.count("/buildkit/")


def test_ctrl_c_during_start_up_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """Ctrl-C at a random moment of the first 0.1 s: from ckit's first line on, one line and exit 130."""
    rng = seeded("ctrl-c at start-up")
    early, handler_line = 0, _handler_line()
    for trial in range(25):
        delay = rng.uniform(0, 0.1)
        proc = subprocess.Popen([CKIT, "recipes", "--all"], stdout=subprocess.PIPE,  # noqa: S603
                                stderr=subprocess.PIPE, cwd=tmp_path)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        text = err.decode(errors="replace")
        if before_ckit(text, handler_line):
            early += 1
            continue
        where = f"trial {trial} at {delay:.3f} s: exit {proc.returncode}\n{text}"
        assert "Traceback" not in text and "Exception ignored" not in text, where
        assert proc.returncode in (130, 0, -signal.SIGINT), where
        assert proc.returncode != 130 or text.strip().endswith("ckit: interrupted"), where
    print(f"{early} of 25 interrupts reached the interpreter before ckit's code")


class SlowArtifact:
    """A registry serving ``team/app:1``, a 16 MiB .sif sent in 64 KiB pieces (about a second)."""

    def __init__(self) -> None:
        self.payload = os.urandom(16 << 20)
        self.digest = "sha256:" + hashlib.sha256(self.payload).hexdigest()
        config = b"{}"
        self.manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.sylabs.sif.config.v1+json",
                       "digest": "sha256:" + hashlib.sha256(config).hexdigest(), "size": len(config)},
            "layers": [{"mediaType": SIF_LAYER, "digest": self.digest, "size": len(self.payload),
                        "annotations": {"org.opencontainers.image.title": "app.sif"}}]}).encode()
        self.server = HostileServer(self.handle)

    def pieces(self):  # type: ignore[no-untyped-def]
        for at in range(0, len(self.payload), 1 << 16):
            yield self.payload[at:at + (1 << 16)]
            time.sleep(0.004)

    def handle(self, request: Seen) -> Reply:
        path = request.path.split("?")[0]
        if path == "/v2/":
            return 200, {}, b"{}"
        if "/manifests/" in path:
            return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, self.manifest
        if path.endswith(self.digest):
            return 200, {"Content-Length": str(len(self.payload))}, self.pieces()
        return 404, {}, b""


def test_sigkill_during_a_pull_leaves_nothing_and_the_next_pull_cleans_up(tmp_path: Path) -> None:
    """Each killed pull is followed at once by another: it removes the .part the killed one left, however young
    (a grace of two seconds for a temp file not locked yet left one behind when the rerun came sooner)."""
    rng = seeded("sigkill during pull")
    registry = SlowArtifact()
    out = tmp_path / "out"
    env = {**os.environ, "CKIT_CACHE_DIR": str(tmp_path / "cache")}
    argv = [CKIT, "pull", f"{registry.server.host}/team/app:1", "-o", str(out)]
    left = 0
    with registry.server:
        for trial in range(4):
            delay = rng.uniform(0, 0.5)
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # noqa: S603
            deadline = time.monotonic() + 60
            while not (out.exists() and any(p.name.endswith(".part") for p in out.iterdir())):
                assert time.monotonic() < deadline and proc.poll() is None, "the download never started"
                time.sleep(0.01)
            time.sleep(delay)  # a random moment of the download (about a second long)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            final = out / "app.sif"
            where = f"trial {trial}, killed {delay:.2f} s into the download"
            assert not final.exists() or final.read_bytes() == registry.payload, where
            left += any(p.name.endswith(".part") for p in out.iterdir()) if out.exists() else 0
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120,  # noqa: S603
                                  check=False)
            assert done.returncode == 0, f"{where}: {done.stderr}"
            assert final.read_bytes() == registry.payload, where
            assert sorted(p.name for p in out.iterdir()) == ["app.sif"], where  # the killed pull's .part is gone
            final.unlink()
    assert left, "no kill landed mid-download"
