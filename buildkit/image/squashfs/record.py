"""The body of a reuse record: one layer's segment, column by column, as little-endian arrays.

A text head line, then the arrays, the whole zstd-compressed::

    {"compression":…,"codec":…,"block_size":…,"layout":…,"base":…,"start":…,"end":…,
     "files":F,"words":W,"groups":G,"alive":A}\\n
    files:  data offsets Q[F], positions Q[F], CRC32s I[F], block counts I[F]; their size words I[W]
    groups: numbers Q[G], positions Q[G], size words I[G], CRC32s I[G], member counts I[G]; the members I[A]

An array costs no object per number to write or to read: a layer with tens of thousands of files encodes in a
few milliseconds, where JSON took a good part of a reconversion's time. A body is input: :func:`decode` reads at
most :data:`MAX_BODY` bytes whatever the frame claims, checks every field of the head, and that the arrays'
lengths add up to exactly the bytes there are before it makes any array (a huge count costs nothing), that the
block and member counts add up and that every size word is one. Positions are checked against the layer and the
artifact later (:func:`.reuse.check_segment`).
"""

from __future__ import annotations

import json
import sys
from array import array
from itertools import accumulate
from typing import Any

from ..layers.columns import MalformedBody, unpacked
from .blocks import UNCOMPRESSED_BLOCK
from .copy import Segment

MAX_BODY = 256 << 20  # a layer with a million files and 100 GB of data needs a few tens of MB
HEAD_MAX = 4096
COUNTS = ("files", "words", "groups", "alive")
COLUMNS = (("files", "QQII"), ("words", "I"), ("groups", "QQIII"), ("alive", "I"))  # typecodes per count
ITEM = {"Q": 8, "I": 4}
assert all(array(code).itemsize == size for code, size in ITEM.items())  # noqa: S101 - every platform Python runs on
BAD_WORD = ~(UNCOMPRESSED_BLOCK | (UNCOMPRESSED_BLOCK - 1))


def _le(values: array) -> bytes:
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def encode(head: dict[str, Any], seg: Segment) -> bytes:
    """The body of a record: ``head`` (its scalars and strings), the segment's bounds and columns, compressed."""
    import zstandard

    files, groups = seg.files, seg.groups
    words = [w for _at, ws, _crc in files.values() for w in ws]
    alive = [n for *_rest, members in groups.values() for n in members]
    columns = [
        array("Q", files), array("Q", (at for at, _w, _c in files.values())),
        array("I", (crc for _a, _w, crc in files.values())), array("I", (len(ws) for _a, ws, _c in files.values())),
        array("I", words),
        array("Q", groups), array("Q", (g[0] for g in groups.values())), array("I", (g[1] for g in groups.values())),
        array("I", (g[2] for g in groups.values())), array("I", (len(g[3]) for g in groups.values())),
        array("I", alive)]
    text = json.dumps({**head, "start": seg.start, "end": seg.end, "files": len(files), "words": len(words), "groups": len(groups),
                       "alive": len(alive)}, separators=(",", ":"))
    return zstandard.ZstdCompressor(level=3).compress(text.encode() + b"\n" + b"".join(map(_le, columns)))


def decode(packed: bytes) -> tuple[dict[str, Any], Segment]:
    """The head and the segment of a record's body, checked for shape (MalformedBody otherwise)."""
    raw = unpacked(packed, MAX_BODY)
    end = raw.find(b"\n", 0, HEAD_MAX)
    if end < 0:
        raise MalformedBody("no head line")
    try:
        head = json.loads(raw[:end])
    except ValueError as err:
        raise MalformedBody(f"malformed head: {err}") from err
    if not isinstance(head, dict):
        raise MalformedBody("malformed head")
    for key in ("base", "start", "end", *COUNTS):
        value = head.get(key)
        if type(value) is not int or not 0 <= value < 1 << 63:
            raise MalformedBody(f"head: {key} is not a count")
    need = sum(head[count] * ITEM[code] for count, codes in COLUMNS for code in codes)
    if need != len(raw) - end - 1:  # before any array is made: a count cannot make it allocate
        raise MalformedBody("the arrays do not fill the body")
    columns, at = [], end + 1
    for count, codes in COLUMNS:
        for code in codes:
            column = array(code)
            column.frombytes(raw[at:at + head[count] * ITEM[code]])
            if sys.byteorder != "little":
                column.byteswap()
            columns.append(column)
            at += head[count] * ITEM[code]
    return head, _segment(head, *columns)


def _segment(head: dict[str, Any], offsets: array, ats: array, crcs: array, blocks: array, words: array,
             numbers: array, gats: array, gwords: array, gcrcs: array, sizes: array, alive: array) -> Segment:
    if sum(blocks) != len(words) or sum(sizes) != len(alive):
        raise MalformedBody("the counts do not add up")
    for column in (words, gwords):
        if column and (max(column) & BAD_WORD or UNCOMPRESSED_BLOCK in column):
            raise MalformedBody("not a size word")
    ends = list(accumulate(blocks, initial=0))
    files = {o: (a, tuple(words[ends[n]:ends[n + 1]]), c) for n, (o, a, c) in enumerate(zip(offsets, ats, crcs, strict=True))}
    ends = list(accumulate(sizes, initial=0))
    groups = {g: (a, w, c, tuple(alive[ends[n]:ends[n + 1]]))
              for n, (g, a, w, c) in enumerate(zip(numbers, gats, gwords, gcrcs, strict=True))}
    if len(files) != len(offsets) or len(groups) != len(numbers):
        raise MalformedBody("a file or group twice")
    return Segment(head["start"], head["end"], files, groups)
