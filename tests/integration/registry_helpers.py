"""Helpers shared by the registry integration tests: run the real ckit CLI, make artifacts, find blobs."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

CKIT = str(Path(sys.executable).parent / "ckit")


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def ckit(*args: str, env: dict[str, str] | None = None, input: str | None = None,
         cwd: Path | None = None) -> Ran:
    """The installed ``ckit`` as a user runs it (a separate process, so logs and exit codes are real)."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run([CKIT, *args], input=input, capture_output=True, text=True, env=full_env,  # noqa: S603
                          cwd=cwd, timeout=600, check=False)
    return Ran(proc.returncode, proc.stdout, proc.stderr)


def unique_repo(prefix: str = "ckit-test") -> str:
    return f"{prefix}/{uuid.uuid4().hex[:10]}"


def fake_sif(path: Path, payload_size: int = 256 * 1024, seed: bytes | None = None) -> Path:
    """A file with a real SIF global header (magic, version 01) and random data behind it."""
    header = bytearray(32176)
    header[:31] = b"#!/usr/bin/env run-singularity\n"
    header[32:42] = b"SIF_MAGIC\x00"
    header[42:45] = b"01\x00"
    header[45:48] = b"02\x00"
    path.write_bytes(bytes(header) + (seed or b"") + os.urandom(payload_size))
    return path


def fake_sqsh(path: Path, payload_size: int = 128 * 1024) -> Path:
    path.write_bytes(b"hsqs" + bytes(92) + os.urandom(payload_size))
    return path


def blob_file(data_dir: Path, digest: str) -> Path:
    hexdigest = digest.split(":", 1)[1]
    return data_dir / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexdigest[:2] / hexdigest / "data"
