"""Making converted images on a store miss: read the layers once, index them once, write every target.

Every target of one source (``ckit build --to sif,sqsh``) shares one materialisation of the image, one
verification of each layer it reads and one pass over the layers' tar headers; each target then adds its own
rootfs additions to a fork of that index and writes its squashfs (and SIF).

Reuse: before reading anything, each layer is looked up in the store's reuse records (:mod:`.squashfs.reuse`)
under the target's compression. A layer with a record for every target is not read at all: its index is
replayed from the record and its data copied from the earlier image. Layers without one are read, verified and
indexed as usual; a layer replayed from a record is read after all (lazily) only when some of its data is not in
the earlier image. After publishing, each target records its layers for the next conversion.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import gc
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.jsondoc import parse as parse_json
from ..errors import ConvertError
from ..fs.files import identity
from ..progress import Meter, Reporter
from ..storage import store as store_mod
from . import targets
from .layers.columns import Columns
from .layers.flatten import Tree
from .layers.headerscan import members
from .model import ImageConfig
from .plan import verifier
from .reading import LayerReader
from .sources.base import LayerBlob
from .speed import malloc
from .speed.tuning import TUNED, Tuning
from .squashfs.codec import Compress, codec_version, compressor, decompressor
from .squashfs.copy import Earlier, EarlierChanged
from .squashfs.reuse import Record, Records
from .squashfs.writer import Ownership, Stats
from .squashfs.writer import build as build_squashfs

if TYPE_CHECKING:
    from .plan import ConvertPlan

log = logging.getLogger("ckit.convert")


def _created(config_blob: dict[str, Any]) -> int:
    text = str(config_blob.get("created") or "")
    try:
        return int(dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC).timestamp())
    except ValueError:
        return 0


def produce(plans: Sequence[ConvertPlan], store: store_mod.Store, progress: Reporter,
            tuning: Tuning = TUNED) -> list[tuple[store_mod.Entry, Stats]]:
    """Make and publish every plan's artifact (all plans convert the same source; hold their keys' locks).
    The artifacts are published only once the scratch folder is gone: a kill from then on leaves at most temp
    files, which the next producer removes, never a folder that no cache hit would clean."""
    with _gc_paused(tuning.pause_gc):
        for plan in plans:
            store.clean_temps(plan.key)
        production = _Production(plans, store, progress, tuning)
        with store.workdir(plans[0].key) as work:
            made = production.run(work)
        return [production.publish(*item) for item in made]


@contextlib.contextmanager
def _gc_paused(pause: bool) -> Iterator[None]:
    """Python's cyclic garbage collector paused (when ``pause``): the index holds hundreds of thousands of
    objects that live until the end, which each full collection would walk again (a third of a reconversion's
    CPU time)."""
    collecting = pause and gc.isenabled()
    if collecting:
        gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _trim(tuning: Tuning) -> None:
    if tuning.trim_memory:
        malloc.trim()


def _codec(plan: ConvertPlan) -> str:
    return codec_version(plan.compression.algo, plan.compression.level)


class _Production:
    """What every target of one source shares: the image's config and layers, the index, the reuse records."""

    def __init__(self, plans: Sequence[ConvertPlan], store: store_mod.Store, progress: Reporter,
                 tuning: Tuning) -> None:
        self.plans, self.store, self.progress, self.tuning = plans, store, progress, tuning
        self.records = Records(store.root)

    def run(self, work: Path) -> list[tuple[ConvertPlan, Path, dict[str, Any], Stats]]:
        """Every target's artifact written to a temp file in the store (published by :meth:`publish`)."""
        self.work = work
        with self.progress.meter("reading layers") as reading:
            tree, found = self._read(reading)
        # each target adds its files to its own copy of the index; the last one takes the index itself
        return [self._target(plan, tree.fork() if n < len(self.plans) - 1 else tree, found[plan.key])
                for n, plan in enumerate(self.plans)]

    def _read(self, reading: Meter) -> tuple[Tree, dict[str, list[Record | None]]]:
        """The image's config and the merged index of its layers (replayed from records where every target has
        one); ``reading`` counts the bytes read (their total is not known ahead: an engine's save has none)."""
        source, epoch = self.plans[0].source, self.plans[0].epoch
        materialized = source.materialize(self.work, reading)
        blob = parse_json(materialized.config, f"{source.text}: the image config", error=ConvertError)
        self.config = ImageConfig.from_image_config(blob, f"{source.text}: the image config")
        self.digests = [b.digest or b.diff_id for b in materialized.layers]
        found = self._records()
        self.layers = LayerReader(materialized.layers, self.work, reading, self._ahead(), self.tuning)
        try:
            dated = epoch if epoch is not None else _created(blob)
            tree, self.members = _index(materialized.layers, found, self.layers, dated, self.tuning)
        finally:
            self.pre = self.layers.precompressed()
        self.records.forget_members()
        _trim(self.tuning)  # the download phase's buffers, before the writer's peak
        return tree, {key: [dataclasses.replace(r, members=[]) if r else None for r in recs]
                      for key, recs in found.items()}

    def _records(self) -> dict[str, list[Record | None]]:
        """Each target's reuse record of each layer (None: none usable), by the target's key."""
        return {plan.key: [self.records.find(d, plan.compression.label, _codec(plan)) if d else None
                           for d in self.digests]
                for plan in self.plans}

    def _ahead(self) -> Callable[[], Compress] | None:
        """The compressor a streamed layer's files are compressed with while it arrives: only when every target
        uses the same codec (one compression serves them all)."""
        codecs = {(plan.compression.algo, plan.compression.level) for plan in self.plans}
        return compressor(*next(iter(codecs))) if len(codecs) == 1 else None

    def _target(self, plan: ConvertPlan, tree: Tree,
                found: list[Record | None]) -> tuple[ConvertPlan, Path, dict[str, Any], Stats]:
        additions, ownership = targets.additions(plan, self.config)
        tree.add_entries(additions, tree.default_mtime)
        temp = self.store.temp_path(plan.key, plan.target)
        start = targets.squashfs_start(plan, self.config)
        try:
            with self.progress.meter(f"writing .{plan.target} ({plan.compression.label})",
                                     total=tree.total_bytes()) as packing:
                stats = self._squashfs(plan, tree, ownership, temp, start, found, packing)
            targets.wrap(temp, plan, self.config, start)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        meta = {"source": plan.source.text, "source_digest": plan.source_digest, "target": plan.target,
                "compression": plan.compression.label, "created": int(time.time()), "source_date_epoch": plan.epoch,
                "reused_bytes": stats.copied, "compressed_bytes": stats.compressed}
        return plan, temp, meta, stats

    def publish(self, plan: ConvertPlan, temp: Path, meta: dict[str, Any],
                stats: Stats) -> tuple[store_mod.Entry, Stats]:
        """Verify and publish a target's temp file, then record where its layers' data lies in it."""
        entry = self.store.publish(plan.key, plan.target, temp, meta, verifier(plan.target), private=plan.private)
        self._record(plan, entry, stats)
        return entry, stats

    def _squashfs(self, plan: ConvertPlan, tree: Tree, ownership: Ownership, out: Path, start: int,
                  found: list[Record | None], advance: Callable[[int], None]) -> Stats:
        """Write the squashfs at ``start`` of ``out``, copying what the records offer; when an earlier image turns
        out changed or damaged, its records are dropped and the squashfs is written again without them."""
        decompress = decompressor(plan.compression.algo)
        # Unset, the superblock says 0 (as before reuse existed): the same image always gives the same .sqsh bytes.
        mkfs_time = plan.epoch if plan.epoch is not None else 0
        usable = {n: rec for n, rec in enumerate(found) if rec is not None}
        while True:
            earlier: dict[int, Earlier] = {}
            try:
                for n, (path, segment) in self.pre.items():  # made with this plan's codec (one codec for all)
                    earlier[n] = Earlier(os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)), 0, segment,
                                         str(path), decompress, fresh=True)
                for n, rec in list(usable.items()):
                    try:
                        earlier[n] = self.records.open(rec, decompress)
                    except OSError:  # removed since it was checked: convert that layer without it
                        del usable[n]
                return build_squashfs(out, plan.compression, tree, ownership, mkfs_time=mkfs_time, progress=advance,
                                      earlier=earlier, open_layer=self.layers.get,
                                      write_behind=self.tuning.write_behind, base=start)
            except EarlierChanged as changed:
                if any(str(path) == changed.path for path, _ in self.pre.values()):  # never expected: a scratch file
                    log.warning("%s changed while the conversion ran; compressing without it", changed.path)
                    self.pre = {n: m for n, m in self.pre.items() if str(m[0]) != changed.path}
                    continue
                log.info("%s does not match its reuse records; converting without it", changed.path)
                self.records.drop_artifact(usable.values(), changed.path)
                usable = {n: r for n, r in usable.items()
                          if str(self.records.artifacts / r.artifact) != changed.path}
            finally:
                for e in earlier.values():
                    os.close(e.fd)

    def _record(self, plan: ConvertPlan, entry: store_mod.Entry, stats: Stats) -> None:
        """Record where each layer's data lies in the published artifact, for the next conversion."""
        base = targets.squashfs_offset(plan.target, entry.path)
        if base is None:
            return
        stat = identity(entry.path)
        self.records.save(
            (Record(digest, plan.compression.label, _codec(plan), entry.path.name, stat, base, stats.segments[n], []),
             self.members[n] or self.records.raw_members.get(digest))
            for n, digest in enumerate(self.digests) if digest)


def _index(blobs: Sequence[LayerBlob], found: dict[str, list[Record | None]], layers: LayerReader,
           mtime: int, tuning: Tuning) -> tuple[Tree, list[bytes | None]]:
    """The merged index of the layers, one pass over each layer's headers; a layer that every target has a
    record for is replayed from it instead of read. Also, for each layer read, its members file encoded (the
    members themselves are not kept: a large image has hundreds of thousands)."""
    read = [n for n in range(len(blobs)) if any(recs[n] is None for recs in found.values())]
    tree = Tree(default_mtime=mtime)
    encoded: list[bytes | None] = []
    with layers.preparing(read) as ready:
        for n, blob in enumerate(blobs):
            if n in read:
                tar = ready(n)  # verified: what was read of it while it arrived counts from now on
                _trim(tuning)  # what its reading freed, before the index grows by it (see :mod:`.speed.malloc`)
                scanned = layers.scanned(n, tar)
                if scanned is None:
                    kept = Columns()
                    tree.add_layer(tar, kept)  # type: ignore[arg-type]
                else:
                    kept = scanned
                    tree.add_layer(tar, scanned=members(scanned))
                encoded.append(kept.encode())
            else:
                record = next(recs[n] for recs in found.values() if recs[n] is not None)
                tree.replay_layer(record.members, blob.what)  # type: ignore[union-attr]
                encoded.append(None)
    if tree.dropped:
        log.info("dropped: %s", ", ".join(f"{n} {why}" for why, n in sorted(tree.dropped.items())))
    return tree, encoded
