"""Reuse records: what they hold survives a round trip, and a record that does not hold together is refused."""

from __future__ import annotations

import base64
import json

import pytest
import zstandard

from buildkit.image.layers import columns as C
from buildkit.image.layers.tarscan import Member
from buildkit.image.squashfs import record as RB
from buildkit.image.squashfs import reuse as R
from buildkit.image.squashfs.blocks import BLOCK_SIZE, UNCOMPRESSED_BLOCK
from buildkit.image.squashfs.copy import Segment

MEMBERS = [
    Member("usr", b"5", 0o755, 0, 0, 1.5, 0, "", 512, 512),
    Member("usr/big", b"0", 0o644, 1000, 1000, 2, 3 * BLOCK_SIZE, "", 1024, 1024, {"SCHILY.xattr.user.a": "b"}),
    Member("usr/small", b"0", 0o600, 0, 0, 3, 100, "", 1024 + 3 * BLOCK_SIZE + 512, 1024 + 3 * BLOCK_SIZE + 512),
    Member("usr/link", b"1", 0o644, 0, 0, 3, 0, "usr/small", 0, 0),
]
SEGMENT = Segment(4096, 4096 + 5000, {1024: (0, (4000, 0, 1000 | UNCOMPRESSED_BLOCK), 7)}, {0: (4000, 50, 9, (0,))})


def record(**changes: object) -> R.Record:
    fields = {"layer": "sha256:" + "a" * 64, "compression": "zstd:1", "codec": "zstd 1.5.7 x", "artifact": "b" * 64 +
              ".sqsh", "stat": (1, 2, 3), "base": 0, "segment": SEGMENT, "members": MEMBERS, **changes}
    return R.Record(**fields)  # type: ignore[arg-type]


def test_members_and_record_round_trip() -> None:
    sha, members = C.decode_members(C.encode_members(MEMBERS))
    assert members == MEMBERS
    decoded, members_sha = R.decode(R.encode(record(), sha))
    assert members_sha == sha and decoded.segment == SEGMENT and decoded.stat == (1, 2, 3)
    R.check_segment(record())


@pytest.mark.parametrize("column, value", [("mode", "AAAA"), ("size", 12), ("uid", "not base64!"), ("name", [7]),
                                           ("mtime", "AAAAAAAAAAAAAAAA"), ("type", None), ("link", "x")])
def test_members_of_the_wrong_shape_are_refused(column: str, value: object) -> None:
    one = base64.b64encode(bytes(8)).decode()
    body = {"name": ["a"], "type": "0", "mode": one, "uid": one, "gid": one, "mtime": one, "size": one,
            "link": [""], "offset": one, "pax": {}}
    C.decode_members(C._framed_members(body))  # sound
    body[column] = value
    with pytest.raises(R.BadRecord):
        C.decode_members(C._framed_members(body))


def test_a_record_whose_body_does_not_match_its_digest_is_refused() -> None:
    raw = bytearray(R.encode(record(), "0" * 64))
    raw[-3] ^= 1
    with pytest.raises(R.BadRecord, match="digest"):
        R.decode(bytes(raw))


@pytest.mark.parametrize("segment", [
    Segment(4096, 4096 + 100, SEGMENT.files, {}),  # a file past the segment's end
    Segment(4096, 4096 + 5000, {2048: (0, (10,) * 3, 0)}, {}),  # no member's data there
    Segment(4096, 4096 + 5000, {1024: (0, (10,) * 2, 0)}, {}),  # block count not the file's
    Segment(4096, 4096 + 5000, {}, {5: (0, 50, 0, (0,))}),  # no such fragment group
    Segment(4096, 4096 + 5000, {}, {0: (0, 50, 0, (1,))}),  # no such member in the group
    Segment(50, 4096, {}, {}),  # inside the superblock
])
def test_positions_outside_the_segment_or_the_layer_are_refused(segment: Segment) -> None:
    with pytest.raises(R.BadRecord):
        R.check_segment(record(segment=segment))


# --- the record's body in columns (format 4) --------------------------------------------------------------------
HEAD = {"compression": "zstd:1", "codec": "zstd 1.5.7 x", "block_size": BLOCK_SIZE, "layout": R.LAYOUT, "base": 0,
        "start": 4096, "end": 9096}
NONE = {"files": 0, "words": 0, "groups": 0, "alive": 0}


def test_a_large_segment_round_trips_in_columns() -> None:
    files = {1024 + n * 4 * BLOCK_SIZE: (n * 300, tuple(range(1, 2 + n % 5)) + (0, 7 | UNCOMPRESSED_BLOCK), n * 7)
             for n in range(5000)}
    groups = {g: (g * 100, 50 + g, (1 << 32) - 1 - g, tuple(range(0, g % 7 + 1, 2))) for g in range(0, 3000, 3)}
    segment = Segment(4096, 1 << 40, files, groups)
    head, decoded = RB.decode(RB.encode(HEAD, segment))
    assert decoded == segment and head["compression"] == "zstd:1" and head["files"] == 5000


def _body(head: dict[str, object], arrays: bytes = b"") -> bytes:
    return zstandard.ZstdCompressor().compress(json.dumps(head).encode() + b"\n" + arrays)


def _framed(packed: bytes) -> bytes:
    return R.files.frame_record(R.files.ReuseRefs("sha256:" + "a" * 64, "b" * 64 + ".sqsh", (1, 2, 3), "0" * 64),
                                packed)


@pytest.mark.parametrize("head, arrays", [
    ({**HEAD, **NONE, "files": 10 ** 15}, b""),  # a huge count: refused before any array is made
    ({**HEAD, **NONE, "files": 1}, bytes(23)),  # one byte short
    ({**HEAD, **NONE, "files": 1}, bytes(25)),  # one byte too many
    ({**HEAD, **NONE, "files": -1}, b""),
    ({**HEAD, **NONE, "files": True}, b""),
    ({**HEAD, **NONE, "base": "0"}, b""),
    ({**HEAD, "files": 0, "words": 0, "groups": 0}, b""),  # a count missing
    ({**HEAD, **NONE, "files": 1}, bytes(20) + (1).to_bytes(4, "little")),  # a file of one block, no size word
    ({**HEAD, **NONE, "groups": 1, "alive": 1}, bytes(28 + 4)),  # a group with no member, and a member of none
    ({**HEAD, **NONE, "words": 1, "files": 1},  # a size word with bits no word has
     bytes(20) + (1).to_bytes(4, "little") + (1 << 25).to_bytes(4, "little")),
    ({**HEAD, **NONE, "words": 1, "files": 1},  # uncompressed, of no bytes
     bytes(20) + (1).to_bytes(4, "little") + UNCOMPRESSED_BLOCK.to_bytes(4, "little")),
    ({**HEAD, **NONE, "groups": 2}, bytes(56)),  # the same group twice
    ({**HEAD, **NONE, "block_size": 4096}, b""),
    ({**HEAD, **NONE, "layout": 0}, b""),
    ({**HEAD, **NONE, "codec": 3}, b""),
    ([1, 2], b""),
])
def test_a_hostile_record_body_is_refused(head: object, arrays: bytes) -> None:
    with pytest.raises(R.BadRecord):
        R.decode(_framed(_body(head, arrays)))  # type: ignore[arg-type]


def test_a_sound_empty_body_is_accepted() -> None:
    record, _ = R.decode(_framed(_body({**HEAD, **NONE})))
    assert record.segment == Segment(4096, 9096, {}, {})


@pytest.mark.parametrize("packed", [
    b"", b"not zstd", b"\n", _body({**HEAD, **NONE})[:-4],  # empty, garbage, truncated
    zstandard.ZstdCompressor().compress(b"{" * (RB.HEAD_MAX + 10) + b"\n"),  # no head line where one must be
])
def test_a_truncated_or_garbled_body_is_refused(packed: bytes) -> None:
    with pytest.raises(R.BadRecord):
        R.decode(_framed(packed))


def test_a_frame_claiming_a_huge_size_is_read_only_up_to_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RB, "MAX_BODY", 1000)
    big = zstandard.ZstdCompressor().compress(b"\n" * 5000)  # its header states its size
    with pytest.raises(R.BadRecord, match="larger"):
        R.decode(_framed(big))


def test_a_record_of_the_earlier_format_is_refused() -> None:
    raw = R.encode(record(), "0" * 64)
    older = b"ckit-reuse 3\n" + raw[len(R.files.RECORD_MAGIC):]
    with pytest.raises(R.BadRecord, match="not a reuse record"):
        R.decode(older)
