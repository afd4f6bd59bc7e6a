"""Convert any image to a ``.sif`` or an Enroot ``.sqsh``: plan (identify, choose, key), then execute.

Execution never runs as root and never extracts a layer: layers → merged index (+ the target's rootfs
additions) → squashfs written from the layers' byte ranges → (SIF wrapper). Results live in the local store,
keyed by the image's config digest and the conversion options; a hit does no work and ``-o FILE`` is an atomic
link or copy from it.

Ownership: a ``.sif`` keeps the image's owners and modes (what ``apptainer build`` as root keeps). A ``.sqsh``
is all-root with ``u+rX`` (and ``u+w`` on directories), exactly what ``enroot import`` produces
(``mksquashfs -all-root`` after ``chmod -R u+rX``), so enroot and Pyxis see the same tree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ConvertError
from ..fsutil import check_output
from ..progress import SILENT, Reporter
from ..reproducible import source_date_epoch
from ..storage import store as store_mod
from . import squashfs
from .registry_source import RegistrySource
from .source import DaemonSource, DockerArchiveSource, OciLayoutSource, Reader, Source, parse_source

if TYPE_CHECKING:
    from ..site.model import Site

TARGETS = ("sif", "sqsh")


@dataclass(frozen=True)
class ConvertResult:
    path: Path
    target: str
    source_digest: str
    compression: str
    size: int
    seconds: float
    cache_hit: bool
    key: str = ""
    reused_bytes: int = 0  # file data copied from earlier conversions of the same layers
    compressed_bytes: int = 0  # file data read from the layers and compressed

    def as_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "target": self.target, "source_digest": self.source_digest,
                "compression": self.compression, "size": self.size, "seconds": round(self.seconds, 3),
                "cache_hit": self.cache_hit, "key": self.key, "reused_bytes": self.reused_bytes,
                "compressed_bytes": self.compressed_bytes}


@dataclass(frozen=True)
class ConvertPlan:
    source: Source
    target: str
    compression: squashfs.Compression
    source_digest: str
    key: str
    output: Path | None
    deffile: str  # the definition apptainer records for such a source
    provenance: str  # Enroot's ``# enroot-provenance:`` value ("" for none): where the image came from
    epoch: int | None = None  # SOURCE_DATE_EPOCH, read once when planning (it is part of the key)
    private: bool = False  # an image fetched with credentials: its artifact is readable by its store's owner only


def deffile_text(source: Source) -> str:
    agent, ref = bootstrap(source)
    return f"bootstrap: {agent}\nfrom: {ref}\n\n"


def provenance(source: Source) -> str:
    """What ``enroot import`` of the same image records in ``/etc/rc`` (enroot after 4.1.2: ``docker::configure``
    writes ``# enroot-provenance: URI`` first): for a registry ``docker://REGISTRY#IMAGE:TAG``, a pinned digest in
    the tag's place (``#IMAGE:sha256:…``, as enroot prints what it parsed, the tag of ``TAG@DIGEST`` dropped); for
    an engine the URI as given (``dockerd://IMAGE``); nothing for a docker save tar or an OCI layout, which enroot
    cannot import (and whose host path is nobody else's business)."""
    if isinstance(source, DaemonSource):
        return f"dockerd://{source.ref}"
    if not isinstance(source, RegistrySource):
        return ""
    ref = source.ref
    return f"docker://{ref.api_host}#{ref.repository}:{ref.digest or ref.tag or 'latest'}"


def bootstrap(source: Source) -> tuple[str, str]:
    """Apptainer's bootstrap agent and ``from:`` for this kind of source."""
    if isinstance(source, DaemonSource):
        return "docker-daemon", source.ref
    if isinstance(source, DockerArchiveSource):
        return "docker-archive", str(source.path)
    if isinstance(source, OciLayoutSource):
        return source.agent, f"{source.path}:{source.tag}" if source.tag else str(source.path)
    return "docker", source.image_ref


def plan(source: str | Source, target: str, *, output: Path | None = None, compress: str | None = None,
         site: Site | None = None, registry: Reader | None = None) -> ConvertPlan:
    """Check the request and identify the image (a cheap read: manifest/config or the engine's image ID).
    ``source`` is a SOURCE string, or a :class:`~.source.Source` a caller converts more than once;
    ``registry`` reads a ``docker://`` SOURCE (:func:`buildkit.registry.source.reader`)."""
    if target not in TARGETS:
        raise ConfigError(f"--to {target!r}: unknown target", hint="use --to sif or --to sqsh")
    compression = squashfs.choose_for(compress, site, target)
    src = source if isinstance(source, Source) else parse_source(source, registry=registry)
    if output is not None:  # before any work: never replace a device, a folder or the input itself
        check_output(output, inputs=input_paths(src), flag="-o")
    epoch = source_date_epoch()
    digest = src.identify().digest
    deffile, origin = deffile_text(src), provenance(src)
    # what lands in the bytes besides the layers: the deffile (sif) or the provenance line (sqsh), and the dates
    key = store_mod.make_key(source_digest=digest, target=target, compression=compression.label,
                             origin=deffile if target == "sif" else origin, source_date_epoch=epoch)
    return ConvertPlan(src, target, compression, digest, key, Path(output) if output else None, deffile, origin,
                       epoch)


def input_paths(source: Source) -> list[Path]:
    """The files a source reads (an output must not be one of them)."""
    return [source.path] if isinstance(source, (DockerArchiveSource, OciLayoutSource)) else []


def verifier(target: str) -> Callable[[Path], object]:
    """The check an artifact passes before it is published or served from the store."""
    if target == "sqsh":
        return squashfs.check

    def check_sif(path: Path) -> None:
        from .sif import read_sif

        sif = read_sif(path)
        part = sif.primary_partition()
        if part is None:
            raise ConvertError(f"{path}: the SIF has no primary partition")
        squashfs.check(path, part.offset)

    return check_sif


def execute(p: ConvertPlan, store: store_mod.Store | None = None, progress: Reporter = SILENT) -> ConvertResult:
    return execute_many([p], store, progress=progress)[0]


def execute_many(plans: Sequence[ConvertPlan], store: store_mod.Store | None = None, *,
                 progress: Reporter = SILENT) -> list[ConvertResult]:
    """Several targets of one source: each comes from the store when it is there; the others are made
    together, from one read of the layers and one pass over their headers (:mod:`.produce`)."""
    if len({id(p.source) for p in plans}) > 1:
        raise ConvertError("execute_many converts one source object to several targets")
    started = time.monotonic()
    store = store or store_mod.Store()
    entries: dict[str, tuple[store_mod.Entry, bool, Any]] = {}
    missing = [p for p in plans if not _from_store(p, store, entries)]
    if missing:
        with ExitStack() as locks:
            for key in sorted({p.key for p in missing}):  # always in the same order: no deadlock
                locks.enter_context(store.lock(key))
            missing = [p for p in missing if not _from_store(p, store, entries)]  # made meanwhile?
            if missing:
                from .produce import produce

                for p, (entry, stats) in zip(missing, produce(missing, store, progress), strict=True):
                    entries[p.key] = (entry, False, stats)
    results = []
    for p in plans:
        entry, hit, stats = entries[p.key]
        path = store_mod.export(entry.path, p.output) if p.output is not None else entry.path
        results.append(ConvertResult(path, p.target, p.source_digest, p.compression.label, path.stat().st_size,
                                     time.monotonic() - started, hit, p.key,
                                     stats.copied if stats else 0, stats.compressed if stats else 0))
    return results


def _from_store(p: ConvertPlan, store: store_mod.Store, found: dict[str, Any]) -> bool:
    entry = store.get(p.key, p.target, verifier(p.target))
    if entry is not None:
        found[p.key] = (entry, True, None)
    return entry is not None


def convert(source: str | Source, target: str, *, output: Path | None = None, compress: str | None = None,
            site: Site | None = None, store: store_mod.Store | None = None, registry: Reader | None = None,
            progress: Reporter = SILENT) -> ConvertResult:
    """Convert ``source`` (a SOURCE string) to ``target`` ("sif" or "sqsh"), via the store; ``progress``
    draws the reading of the layers and the writing of the squashfs."""
    return execute(plan(source, target, output=output, compress=compress, site=site, registry=registry), store,
                   progress)


def convert_many(source: str | Source, targets: Sequence[tuple[str, Path | None]], *,
                 store: store_mod.Store | None = None, progress: Reporter = SILENT,
                 **options: Any) -> list[ConvertResult]:
    """``source`` to every (target, output) in ``targets``, reading and indexing the layers once."""
    src = source if isinstance(source, Source) else parse_source(source, registry=options.get("registry"))
    return execute_many([plan(src, target, output=output, **options) for target, output in targets], store,
                        progress=progress)
