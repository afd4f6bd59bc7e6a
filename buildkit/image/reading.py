"""A conversion's layers as verified tars, prepared on first use, several at once.

Prepared plainly, a layer is read (downloaded, decompressed, verified) into a tar whose headers the index then
reads. A streamed layer (a registry's, an engine's storage) can do more while it arrives, as the
:class:`~.speed.tuning.Tuning` allows: its headers are read as its spool grows (:mod:`.layers.headerscan`), its
large files compressed ahead for the squashfs writer (:mod:`.squashfs.precompress`), and the largest one keeps a
CPU to itself (:mod:`.speed.cpushare`). None of that changes the output: the writer copies only what matches.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import ConvertError
from .layers.columns import Columns
from .layers.growing import Growing
from .layers.headerscan import HeaderScan
from .layers.layerfile import LayerTar, Sharing, prepare, spool_path
from .sources.base import LayerBlob
from .speed.cpushare import CpuShare
from .speed.tuning import TUNED, Tuning
from .squashfs.copy import Segment
from .squashfs.precompress import Precompressor

STREAMS = 3  # layers fetched at once from a registry (docker's default too)


class LayerReader:
    """The image's layers as verified tars, prepared on first use (compressed ones decompressed into ``work``);
    ``make``: the compressor factory a streamed layer's files are compressed ahead with (None: not at all)."""

    def __init__(self, blobs: Sequence[LayerBlob], work: Path, progress: Callable[[int], None],
                 make: Callable[[], Callable[[bytes], bytes]] | None = None, tuning: Tuning = TUNED) -> None:
        self.blobs, self.work, self.tuning = blobs, work, tuning
        self.make = make if tuning.precompress else None
        self._tars: dict[int, LayerTar] = {}
        self._pre: dict[int, Precompressor] = {}
        self._scans: dict[int, HeaderScan] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

        def advance(n: int) -> None:  # every chunk read passes here: where a failed sibling stops the others
            if self._stop.is_set():
                raise ConvertError("stopped: another layer failed")
            progress(n)

        self.progress = advance

    def get(self, number: int, share: CpuShare | None = None, critical: bool = False, scan: bool = False) -> LayerTar:
        """The layer as a verified tar; ``scan``: a streamed layer's headers are read while it arrives (see
        :meth:`scanned`)."""
        with self._lock:
            tar, make = self._tars.get(number), self.make
        if tar is None:
            blob, growing = self.blobs[number], None
            scan = scan and self.tuning.scan_headers
            if blob.chunks is not None and (make is not None or scan):
                growing = Growing()  # a registry's or an engine's layer: followed while it arrives
                spool = spool_path(self.work, number + 1)
                headers = HeaderScan(spool, growing, blob.what)  # its headers read (for its files too)
                with self._lock:
                    self._scans[number] = headers  # stopped by precompressed() when not taken
                    if make is not None:  # its large files compressed
                        self._pre[number] = Precompressor(spool, growing, make, blob.what, headers.files, share)
            tar = prepare(blob, self.work, number + 1, self.progress, growing,
                          Sharing(share, critical) if share is not None else None)
            with self._lock:
                self._tars[number] = tar
        return tar

    def scanned(self, number: int, tar: LayerTar) -> Columns | None:
        """The members of layer ``number`` (``tar``, as :meth:`get` gave it: verified) read while it arrived,
        None when they were not (or not from ``tar``): its headers are then read from ``tar``."""
        with self._lock:
            scan = self._scans.pop(number, None)
        return scan.columns(tar) if scan is not None else None

    def precompressed(self) -> dict[int, tuple[Path, Segment]]:
        """Stop the precompressors; what they made, by layer number. A layer prepared later (the writer needs
        data of one it skipped) gets none: the writer waits for it and compresses it itself. Header scans not
        taken (the reading failed) stop too: a stream that failed before it began never says it ended."""
        with self._lock:
            pres, self._pre, self.make = self._pre, {}, None  # let go: each holds its layer's header columns
            scans, self._scans = list(self._scans.values()), {}
        for scan in scans:
            scan.growing.stop()
        made = {n: pre.result() for n, pre in pres.items()}
        return {n: m for n, m in made.items() if m is not None}

    @contextlib.contextmanager
    def preparing(self, numbers: Sequence[int]) -> Iterator[Callable[[int], LayerTar]]:
        """Prepare several layers at once and give a function that waits for one: the caller indexes layer 1
        while later ones still download or decompress. Local compressed layers take one thread per CPU; layers
        that arrive as streams (a registry's) :data:`STREAMS` at a time, as docker and skopeo pull."""
        streamed = any(self.blobs[n].chunks is not None for n in numbers)
        workers = min(len(numbers), max(os.cpu_count() or 1, STREAMS if streamed else 1))
        if workers <= 1:
            yield lambda n: self.get(n, scan=True)
            return
        share, critical = None, None
        if streamed:  # the largest streamed layer ends the reading phase: it starts first and keeps a CPU
            critical = max((n for n in numbers if self.blobs[n].chunks is not None), key=lambda n: self.blobs[n].size)
            share = CpuShare(os.cpu_count() or 1) if self.tuning.share_cpus else None
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="layer")
        futures = {n: pool.submit(self.get, n, share, n == critical, True)
                   for n in sorted(numbers, key=lambda n: (n != critical, n))}
        try:
            yield lambda n: futures[n].result() if n in futures else self.get(n, scan=True)
        except BaseException:
            self._stop.set()  # the others end at their next chunk (Ctrl-C does not wait for gigabytes)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
