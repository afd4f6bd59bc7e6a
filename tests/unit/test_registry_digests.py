"""The hash-as-you-send file wrapper and the remembered digests of local files."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest

from buildkit.errors import IntegrityError
from buildkit.registry.distribution.streams import HashingFile
from buildkit.registry.transfer import known_digests

DATA = bytes(range(256)) * 4096  # 1 MiB


def expected() -> str:
    return "sha256:" + hashlib.sha256(DATA).hexdigest()


def test_sequential_reads_hash_the_whole_file() -> None:
    f = HashingFile(io.BytesIO(DATA))
    while f.read(100_000):
        pass
    assert f.digest(len(DATA)) == expected()


def test_resent_ranges_are_not_hashed_twice() -> None:
    f = HashingFile(io.BytesIO(DATA))
    f.read(300_000)
    f.seek(100_000)  # a chunk resumed from the registry's range
    f.read(400_000)
    f.seek(0)  # the registry forgot the upload: start again
    while f.read(65_536):
        pass
    assert f.digest(len(DATA)) == expected()


def test_a_gap_is_refused() -> None:
    f = HashingFile(io.BytesIO(DATA))
    f.read(10)
    f.seek(20)
    with pytest.raises(IntegrityError, match="skipped bytes 10-19"):
        f.read(10)


def test_a_short_read_is_not_a_digest() -> None:
    f = HashingFile(io.BytesIO(DATA))
    f.read(10)
    with pytest.raises(IntegrityError, match="changed while it was being pushed"):
        f.digest(len(DATA))


def test_a_remembered_digest_holds_while_the_file_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "a.sif"
    path.write_bytes(DATA)
    assert known_digests.lookup(path, tmp_path / "cache") is None
    known_digests.remember(path, expected(), root=tmp_path / "cache")
    assert known_digests.lookup(path, tmp_path / "cache") == expected()


def test_any_change_to_the_file_forgets_its_digest(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    path = tmp_path / "a.sif"
    path.write_bytes(DATA)
    known_digests.remember(path, expected(), root=root)
    st = path.stat()
    with path.open("r+b") as f:  # same size, same mtime afterwards: only the ctime tells
        f.write(b"X")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert known_digests.lookup(path, root) is None
    replacement = tmp_path / "b.sif"
    replacement.write_bytes(DATA)
    known_digests.remember(replacement, expected(), root=root)
    os.replace(replacement, path)  # the same bytes under the name, but another inode: remembered as b.sif only
    assert known_digests.lookup(path, root) is None


def test_a_damaged_entry_is_ignored(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    path = tmp_path / "a.sif"
    path.write_bytes(DATA)
    known_digests.remember(path, "sha256:not-hex", root=root)
    assert known_digests.lookup(path, root) is None


def test_a_file_that_changed_after_it_was_read_is_not_remembered(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    path = tmp_path / "a.sif"
    path.write_bytes(DATA)
    seen = known_digests.identity(path)
    with path.open("ab") as f:  # appended to while the upload ran
        f.write(b"more")
    known_digests.remember(path, expected(), seen, root=root)
    assert known_digests.lookup(path, root) is None
