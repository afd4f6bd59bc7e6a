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

import os
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConvertError
from ..progress import SILENT, Reporter
from ..storage import store as store_mod
from .plan import TARGETS as TARGETS
from .plan import ConvertPlan as ConvertPlan
from .plan import plan as plan
from .plan import provenance as provenance
from .plan import verifier as verifier
from .sources.base import Reader, Source
from .sources.named import parse_source
from .speed.tuning import Tuning

if TYPE_CHECKING:
    from ..site.model import Site


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


def execute(p: ConvertPlan, store: store_mod.Store | None = None, progress: Reporter = SILENT,
            tuning: Tuning | None = None) -> ConvertResult:
    return execute_many([p], store, progress=progress, tuning=tuning)[0]


def execute_many(plans: Sequence[ConvertPlan], store: store_mod.Store | None = None, *,
                 progress: Reporter = SILENT, tuning: Tuning | None = None) -> list[ConvertResult]:
    """Several targets of one source: each comes from the store when it is there; the others are made
    together, from one read of the layers and one pass over their headers (:mod:`.produce`). ``tuning``: the
    speed mechanisms used on a miss; None reads ``CKIT_PLAIN`` here, once (:mod:`.speed.tuning`)."""
    if len({id(p.source) for p in plans}) > 1:
        raise ConvertError("execute_many converts one source object to several targets")
    tuning = tuning if tuning is not None else Tuning.from_env(os.environ)
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
                from .produce import produce  # on a store miss only: what it imports costs a hit's start-up

                for p, (entry, stats) in zip(missing, produce(missing, store, progress, tuning), strict=True):
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
            progress: Reporter = SILENT, tuning: Tuning | None = None) -> ConvertResult:
    """Convert ``source`` (a SOURCE string) to ``target`` ("sif" or "sqsh"), via the store; ``progress``
    draws the reading of the layers and the writing of the squashfs."""
    return execute(plan(source, target, output=output, compress=compress, site=site, registry=registry), store,
                   progress, tuning)


def convert_many(source: str | Source, targets: Sequence[tuple[str, Path | None]], *,
                 store: store_mod.Store | None = None, progress: Reporter = SILENT,
                 tuning: Tuning | None = None, **options: Any) -> list[ConvertResult]:
    """``source`` to every (target, output) in ``targets``, reading and indexing the layers once."""
    src = source if isinstance(source, Source) else parse_source(source, registry=options.get("registry"))
    return execute_many([plan(src, target, output=output, **options) for target, output in targets], store,
                        progress=progress, tuning=tuning)
