"""What a build engine is: its requests, results, events and the :class:`Engine` protocol.

An engine turns a rendered build context (:func:`buildkit.render.context.build_context`) into an image: the docker engine into an
image in a Docker-API daemon (Docker or podman), the apptainer engine into a ``.sif`` file. Adding an engine
is adding one module that defines a class and names it in its ``ENGINES`` (found by name: :mod:`.select`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from ..errors import BuildError
from ..oci import labels as keys
from ..render.context import ContextFile, context_tar

ContextFormat = Literal["docker", "singularity"]
Product = Literal["image", "sif"]


LOG_TAIL_LINES = 30


class BuildFailed(BuildError):
    """A build that failed inside the engine: names the step, shows the log tail, keeps the full log."""

    def __init__(self, cause: str, *, step: str | None, log: list[str], hint: str | None = None) -> None:
        self.step, self.cause = step, cause
        self.advice = hint  # what to do, when the engine knows more than "fix the step"
        self.log = "\n".join(log)
        tail = "\n".join(log[-LOG_TAIL_LINES:])
        where = f" at {step}" if step else ""
        super().__init__(f"build failed{where}: {cause}\n--- last {min(len(log), LOG_TAIL_LINES)} lines of the "
                         f"build log ---\n{tail}", hint=hint or "fix the step named above; the full log is above")


@dataclass(frozen=True)
class BuildEvent:
    """One line of engine output; ``step``/``steps`` are set when the line starts a build step."""

    line: str
    step: int | None = None
    steps: int | None = None


BuildListener = Callable[[BuildEvent], None]


BUILD_KEY_LABEL = keys.BUILD_KEY


@dataclass(frozen=True)
class BuildRequest:
    """Everything an engine needs: the context, its key, what to call the result and the labels to stamp on it.

    ``key`` identifies the inputs (see :func:`context_digest`): an earlier result with the same key is reused.
    ``no_cache`` and ``pull`` mean what ``docker build --no-cache`` / ``--pull`` mean: run every step again, and
    pull the base image even when the engine has it.
    """

    context: Sequence[ContextFile]
    key: str
    tag: str
    labels: Mapping[str, str] = field(default_factory=dict)
    no_cache: bool = False
    pull: bool = False


@dataclass(frozen=True)
class BuiltImage:
    engine: str
    ref: str  # image tag in the engine, or the path of the file built
    image_id: str | None
    seconds: float
    cache_hit: bool
    log: str = ""
    size: int | None = None  # bytes, when the engine reports it
    # the engine's description of the image (Docker API inspect), when it has one: a conversion from the engine
    # starts from it instead of asking again
    inspected: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Availability:
    ok: bool
    detail: str  # where it was found, or why not


@runtime_checkable
class Engine(Protocol):
    name: ClassVar[str]
    context_format: ClassVar[ContextFormat]
    product: ClassVar[Product]
    # what callers ask of an engine instead of its class: it keeps build layers (so --no-cache and --pull mean
    # something), and the image daemon its product lives in (None: its product is a file)
    keeps_layers: ClassVar[bool]

    @property
    def image_daemon(self) -> Any:
        """The daemon connection holding the built image, for converting it without asking again; None for an
        engine whose product is a file."""

    def probe(self) -> Availability:
        """Whether this engine can build here, cheaply (no build work)."""

    def cached(self, request: BuildRequest) -> BuiltImage | None:
        """The result of an earlier build with the same ``request.key``, or None."""

    def build(self, request: BuildRequest, listener: BuildListener) -> BuiltImage:
        """Build; stream output lines to ``listener``; raise BuildError naming the failing step."""


def context_digest(context: Sequence[ContextFile]) -> str:
    """sha256 of the build context as uploaded (a deterministic tar): the build cache key."""
    return hashlib.sha256(context_tar(list(context))).hexdigest()


def context_file(context: Sequence[ContextFile], path: str) -> bytes | None:
    return next((f.data for f in context if f.path == path), None)
