"""The apptainer engine: ``apptainer build [--fakeroot] OUT.sif Singularity.def`` (or ``singularity``).

It runs through :mod:`buildkit.process`, the project's one command runner, rather than spython's
``Client.build``: spython starts its own subprocesses, prepends ``sudo`` by default and knows no
``--fakeroot`` policy, while the runner gives redacted argv, exit code and stderr tail in every error.

The context is written to a temporary folder; the SIF is built to a temporary name in the artifact store,
checked (it must read as a SIF), and published under a key derived from the build context: an interrupted
build leaves nothing at a final path, and a second build of the same context is a cache hit.

Either binary: SingularityCE sites have ``singularity``, Apptainer ones ``apptainer`` (and often a ``singularity``
link). Run for real with Debian's Apptainer 1.4.5 (and, in earlier releases, with SingularityCE 3.4.2). Two things
the command line must say:

* ``--fakeroot`` when not root, and also for root whose capability bounding set is not full (a container, a
  locked-down VM): singularity gives the build's ``%post`` every capability and its starter fails ("Failed to set
  process capabilities") when the bounding set holds fewer; in a fakeroot user namespace the set is full. Fakeroot
  needs the user's range in ``/etc/subuid`` and ``/etc/subgid``.
* ``--no-https`` when the definition's base is on a loopback registry that speaks plain http (ckit's own client
  uses http there too): singularity otherwise only tries https. SingularityCE 3.x spells it ``--nohttps``,
  Apptainer 1.4 knows only ``--no-https``: the spelling is the one the binary's ``build --help`` lists.
"""

from __future__ import annotations

import os
import socket
import ssl
import tempfile
import time
from pathlib import Path
from typing import ClassVar

from .. import process
from ..errors import BuildError, ConfigError
from ..image.sif.read import read_sif
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


def build_argv(binary: str, output: Path, *, fakeroot: bool, nohttps: str | None = None,
               definition: str = DEFINITION) -> list[str]:
    """The build command; ``--fakeroot``: the user is root in a user namespace; ``nohttps``: the flag (as the
    binary spells it, :func:`nohttps_flag`) when a plain-http registry serves the base."""
    return [binary, "build", *(["--fakeroot"] if fakeroot else []), *([nohttps] if nohttps else []),
            str(output), definition]


def nohttps_flag(build_help: str) -> str:
    """``--no-https`` where ``build --help`` lists it (Apptainer, SingularityCE >= 3.7), else ``--nohttps``."""
    return "--no-https" if "--no-https" in build_help else "--nohttps"


def needs_fakeroot(euid: int, status: str, last_cap: int) -> bool:
    """Not root, or root without every capability up to ``last_cap`` in its bounding set (``status`` is the text
    of /proc/self/status): singularity's privileged build could not hand %post the full set."""
    if euid != 0:
        return True
    bounding = next((line.split()[1] for line in status.splitlines() if line.startswith("CapBnd:")), None)
    return bounding is not None and int(bounding, 16) & ((1 << (last_cap + 1)) - 1) != (1 << (last_cap + 1)) - 1


def _needs_fakeroot_here() -> bool:
    try:
        status = Path("/proc/self/status").read_text()
        last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return os.geteuid() != 0
    return needs_fakeroot(os.geteuid(), status, last_cap)


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


def base_registry(definition: str) -> str | None:
    """The registry host[:port] of a ``Bootstrap: docker`` definition's ``From:`` (None: Docker Hub, or not a
    docker base)."""
    header: dict[str, str] = {}
    for line in definition.splitlines():
        if line.startswith("%"):
            break
        key, sep, value = line.partition(":")
        if sep and not line[:1].isspace() and not line.startswith("#"):
            header.setdefault(key.strip().lower(), value.strip())
    if header.get("bootstrap", "").lower() != "docker":
        return None
    first, _, rest = header.get("from", "").partition("/")
    return first if rest and ("." in first or ":" in first or first == "localhost") else None


def plain_http(host: str, timeout: float = 5.0) -> bool:
    """Whether a loopback registry at ``host`` (name[:port]) answers a TLS handshake with something else."""
    if host.startswith("["):
        name, _, port = host[1:].partition("]")
        port = port.lstrip(":")
    else:
        name, _, port = host.partition(":")
    if name not in ("localhost", "127.0.0.1", "::1"):
        return False
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((name, int(port or 443)), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=name):
            return False
    except ssl.SSLError:
        return True
    except (OSError, ValueError):
        return False  # nothing answers: singularity will say so


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
            registry = base_registry((context_file(request.context, DEFINITION) or b"").decode(errors="replace"))
            fakeroot = _needs_fakeroot_here()
            flag = None
            if registry and plain_http(registry):
                usage = process.run([binary, "build", "--help"], step="apptainer build --help", check=False)
                flag = nohttps_flag(usage.stdout + usage.stderr)
            argv = build_argv(binary, output, fakeroot=fakeroot, nohttps=flag)
            listener(BuildEvent(f"running: {' '.join(argv)}"))
            result = process.run(argv, step="apptainer build", cwd=context_dir, check=False)
        lines = (result.stdout + result.stderr).splitlines()
        for line in lines:
            listener(BuildEvent(line))
        if result.returncode != 0 or not output.is_file():
            hint = None
            if fakeroot and any("subuid" in line or "subgid" in line for line in lines):
                hint = ("the build runs with --fakeroot (not root, or root without a full capability bounding set), "
                        "which needs a range for this user in /etc/subuid and /etc/subgid")
            raise BuildFailed(f"{Path(binary).name} build exited with code {result.returncode}",
                              step=failing_section(lines), log=lines, hint=hint)
        return lines


def store_key(build_key: str) -> str:
    """The store key of an apptainer build: the build context's digest, tagged with the engine."""
    return make_key(engine="apptainer", build_key=build_key)


ENGINES = (ApptainerEngine,)  # found by name (:mod:`.select`)
