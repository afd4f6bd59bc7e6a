"""``docker-daemon:`` images read where podman keeps them: no ``save``, the same bytes, a fallback to ``save``.

The podman service of the test components keeps its storage under the run dir, readable by the tests (root),
as a rootful podman's is by root. Its layers are reassembled from their tar-split records and files, checked
against the config's diff_ids, and converted to exactly what the engine's save gives; a layer that does not
match falls back to the save. Crafted layer directories show that a symlink, a ``..`` name or a FIFO can never
make ckit read outside a layer or block.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.errors import ConvertError
from buildkit.image.convert import convert
from buildkit.image.sources import engine_storage
from buildkit.image.sources.docker_daemon import DaemonSource
from buildkit.storage.store import Store


@pytest.fixture
def saves(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    seen: list[str] = []
    real = DaemonSource.spool

    def counting(self, workdir, progress=None):  # type: ignore[no-untyped-def]
        seen.append(self.ref)
        return real(self, workdir, progress)

    monkeypatch.setattr(DaemonSource, "spool", counting)
    yield seen


def test_podman_layers_are_read_from_its_storage_without_a_save(debian_image: str, tmp_path: Path, saves: list[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    direct = convert(f"docker-daemon:{debian_image}", "sqsh", store=Store(tmp_path / "direct"))
    assert saves == []  # nothing went through the engine's save
    monkeypatch.setattr(engine_storage, "locate", lambda *args: None)
    saved = convert(f"docker-daemon:{debian_image}", "sqsh", store=Store(tmp_path / "saved"))
    assert saves == [debian_image]
    assert direct.path.read_bytes() == saved.path.read_bytes()


def test_a_layer_that_does_not_match_its_diff_id_comes_from_the_save(debian_image: str, tmp_path: Path,
                                                                     saves: list[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    real = engine_storage.assemble

    def tampered(layer: engine_storage.StoredLayer) -> Iterator[bytes]:
        for n, chunk in enumerate(real(layer)):
            yield chunk if n != 3 else chunk[:-1] + b"?"

    monkeypatch.setattr(engine_storage, "assemble", tampered)
    result = convert(f"docker-daemon:{debian_image}", "sqsh", store=Store(tmp_path / "a"))
    assert saves == [debian_image]
    monkeypatch.setattr(engine_storage, "assemble", real)
    assert result.path.read_bytes() == convert(f"docker-daemon:{debian_image}", "sqsh",
                                               store=Store(tmp_path / "b")).path.read_bytes()


def test_storage_that_cannot_be_read_means_a_save(debian_image: str, tmp_path: Path, saves: list[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(*args: object) -> None:
        raise engine_storage.Unreadable("permission denied")

    monkeypatch.setattr(engine_storage, "find", unreadable)
    convert(f"docker-daemon:{debian_image}", "sif", store=Store(tmp_path / "a"))
    assert saves == [debian_image]


# --- crafted layer directories ----------------------------------------------------------------------------------
def _stored(tmp_path: Path, members: list[tuple[str, bytes]]) -> tuple[engine_storage.StoredLayer, bytes]:
    """A layer's tar of ``members`` (files), its directory of files and its tar-split record, as podman keeps them."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = raw.getvalue()
    entries, pos = [], 0
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            entries.append({"type": 2, "payload": base64.b64encode(data[pos:member.offset_data]).decode()})
            entries.append({"type": 1, "name": member.name, "size": member.size})
            pos = member.offset_data + member.size  # the padding goes with the next segment
    entries.append({"type": 2, "payload": base64.b64encode(data[pos:]).decode()})
    split = tmp_path / "layer.tar-split.gz"
    with gzip.open(split, "wt") as out:
        out.write("".join(json.dumps(e) + "\n" for e in entries))
    files = tmp_path / "diff"
    files.mkdir()
    return engine_storage.StoredLayer("sha256:" + "0" * 64, len(data), files, split), data


def test_a_layer_is_reassembled_byte_for_byte(tmp_path: Path) -> None:
    members = [("etc/hosts", b"127.0.0.1 localhost\n"), ("usr/lib/big", os.urandom(3 << 20)), ("empty", b"")]
    layer, data = _stored(tmp_path, members)
    for name, content in members:
        (layer.files / name).parent.mkdir(parents=True, exist_ok=True)
        (layer.files / name).write_bytes(content)
    assert b"".join(engine_storage.assemble(layer)) == data


def test_many_small_files_are_handed_on_in_few_chunks(tmp_path: Path) -> None:
    """A header, the data and the padding of every small file used to be three pieces, each a write and a wake-up
    of the precompressor downstream: joined, 2,000 files make a handful of chunks, in order, byte for byte."""
    members = [(f"site-packages/m{n}.py", b"x = %d\n" % n * 40) for n in range(2000)]
    members.append(("usr/lib/big", os.urandom(3 << 20)))
    layer, data = _stored(tmp_path, members)
    for name, content in members:
        (layer.files / name).parent.mkdir(parents=True, exist_ok=True)
        (layer.files / name).write_bytes(content)
    chunks = list(engine_storage.assemble(layer))
    assert b"".join(chunks) == data
    assert len(chunks) <= 3 + (len(data) >> 20) + 2  # small pieces joined to about 1 MiB; the big file's chunks whole
    assert all(chunks)


def test_joining_keeps_order_and_passes_large_pieces_whole() -> None:
    pieces = [b"a" * 10, b"", b"b" * 10, b"c" * 40, b"d" * 5, b"e" * 30]
    out = list(engine_storage._joined(iter(pieces), size=32))
    assert b"".join(out) == b"".join(pieces)
    assert out == [b"a" * 10 + b"b" * 10, b"c" * 40, b"d" * 5, b"e" * 30]


@pytest.mark.parametrize("how", ["symlinked dir", "symlinked file", "dot-dot", "fifo", "other size"])
def test_a_layer_directory_cannot_lead_outside_or_block(how: str, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"host file!")
    name = {"dot-dot": "../host-secret", "symlinked dir": "link/host-secret"}.get(how, "x/file")
    layer, _ = _stored(tmp_path, [(name, b"host file!")])
    (layer.files / "x").mkdir()
    if how == "symlinked dir":
        (layer.files / "link").symlink_to(tmp_path)
    elif how == "symlinked file":
        (layer.files / "x/file").symlink_to(secret)
    elif how == "fifo":
        os.mkfifo(layer.files / "x/file")
    elif how == "other size":
        (layer.files / "x/file").write_bytes(b"host file!!")
    with pytest.raises(ConvertError):
        b"".join(engine_storage.assemble(layer))
