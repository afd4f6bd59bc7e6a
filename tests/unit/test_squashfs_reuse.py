"""Reuse records: what they hold survives a round trip, and a record that does not hold together is refused."""

from __future__ import annotations

import base64

import pytest

from buildkit.image import squashfs_reuse as R
from buildkit.image.squashfs_blocks import BLOCK_SIZE, UNCOMPRESSED_BLOCK
from buildkit.image.squashfs_copy import Segment
from buildkit.image.tarscan import Member

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
    sha, members = R.decode_members(R.encode_members(MEMBERS))
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
    R.decode_members(R._framed_members(body))  # sound
    body[column] = value
    with pytest.raises(R.BadRecord):
        R.decode_members(R._framed_members(body))


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
