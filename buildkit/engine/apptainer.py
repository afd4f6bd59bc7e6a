"""The apptainer engine: ``apptainer build [--fakeroot] OUT.sif Singularity.def`` (or ``singularity``).

It runs through :mod:`buildkit.process`, the project's one command runner, rather than spython's
``Client.build``: spython starts its own subprocesses, prepends ``sudo`` by default and knows no
``--fakeroot`` policy, while the runner gives redacted argv, exit code and stderr tail in every error.

The context is written to a temporary folder; the SIF is built to a temporary name in the artifact store,
checked (it must read as a SIF), and published under a key derived from the build context: an interrupted
build leaves nothing at a final path, and a second build of the same context is a cache hit.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import ClassVar

from .. import process
from ..errors import BuildError, ConfigError
from ..image.sif import read_sif
from ..render.context import write_context
from ..storage.store import Store, make_key
from .base import (
    Availability,
    BuildEvent,
    BuildFailed,
    BuildListener,
    BuildRequest,
    BuiltImage,
    ContextFormat,
    Product,
    context_file,
    register,
)

BINARIES = ("apptainer", "singularity")
DEFINITION = "Singularity.def"
# apptainer's log line when it enters each part of a definition file -> the part's name.
SECTION_MARKERS = (
    ("Running setup scriptlet", "%setup"),
    ("Copying files", "%files"),
    ("Running post scriptlet", "%post"),
    ("Adding environment to container", "%environment"),
    ("Adding runscript", "%runscript"),
    ("Running test scriptlet", "%test"),
    ("Creating SIF file", "SIF creation"),
)


def build_argv(binary: str, output: Path, *, fakeroot: bool, definition: str = DEFINITION) -> list[str]:
    """The build command; ``--fakeroot`` when not root (apptainer maps the user to root in a user namespace)."""
    return [binary, "build", *(["--fakeroot"] if fakeroot else []), str(output), definition]


def failing_section(lines: list[str]) -> str | None:
    """The definition part apptainer was in when it stopped, from its INFO lines."""
    section = None
    for line in lines:
        for marker, name in SECTION_MARKERS:
            if marker in line:
                section = name
    return section


def find_binary() -> str | None:
    for name in BINARIES:
        path = process.which(name)
        if path:
            return path
    return None


@register
class ApptainerEngine:
    """apptainer or singularity building a ``.def`` straight to a ``.sif``."""

    name: ClassVar[str] = "apptainer"
    context_format: ClassVar[ContextFormat] = "singularity"
    product: ClassVar[Product] = "sif"

    def probe(self) -> Availability:
        binary = find_binary()
        if binary is None:
            return Availability(False, "neither apptainer nor singularity is on PATH")
        return Availability(True, binary)

    def __init__(self, store: Store | None = None) -> None:
        self.store = store or Store()

    def cached(self, request: BuildRequest) -> BuiltImage | None:
        entry = self.store.get(store_key(request.key), "sif", verify=read_sif)
        return None if entry is None else BuiltImage(self.name, str(entry.path), None, 0.0, True)

    def build(self, request: BuildRequest, listener: BuildListener) -> BuiltImage:
        binary = find_binary()
        if binary is None:
            raise ConfigError("--engine apptainer: neither apptainer nor singularity is on PATH",
                              hint="install apptainer, or use --engine docker")
        if context_file(request.context, DEFINITION) is None:
            raise BuildError(f"the build context has no {DEFINITION}")
        key = store_key(request.key)
        started = time.monotonic()
        with self.store.lock(key):
            earlier = self.cached(request)  # a concurrent run may have built it while we waited
            if earlier is not None:
                return earlier
            temp = self.store.temp_path(key, "sif")
            temp.unlink()  # apptainer refuses to overwrite a file without --force
            try:
                lines = self._run(binary, request, temp, listener)
                entry = self.store.publish(key, "sif", temp, {"target": "sif", "engine": self.name,
                                                              "build_key": request.key, "tag": request.tag},
                                           verify=read_sif)
            finally:
                temp.unlink(missing_ok=True)
        return BuiltImage(self.name, str(entry.path), None, time.monotonic() - started, False, "\n".join(lines))

    def _run(self, binary: str, request: BuildRequest, output: Path, listener: BuildListener) -> list[str]:
        with tempfile.TemporaryDirectory(prefix="ckit-context-") as context_dir:
            write_context(list(request.context), Path(context_dir))
            argv = build_argv(binary, output, fakeroot=os.geteuid() != 0)
            listener(BuildEvent(f"running: {' '.join(argv)}"))
            result = process.run(argv, step="apptainer build", cwd=context_dir, check=False)
        lines = (result.stdout + result.stderr).splitlines()
        for line in lines:
            listener(BuildEvent(line))
        if result.returncode != 0 or not output.is_file():
            raise BuildFailed(f"{Path(binary).name} build exited with code {result.returncode}",
                              step=failing_section(lines), log=lines)
        return lines


def store_key(build_key: str) -> str:
    """The store key of an apptainer build: the build context's digest, tagged with the engine."""
    return make_key(engine="apptainer", build_key=build_key)
