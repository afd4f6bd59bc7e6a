"""Reconverting from a registry downloads only what changed: a lower layer whose data the store holds in an
earlier output, with its members record (bound to the layer digest the manifest names), is not fetched at all.

Blobs are counted by a hook on the registry reader (every byte fetched passes through it); each warm result is
compared byte for byte with a cold conversion of the same image from the registry, for every kind of change,
``.sqsh`` and ``.sif``, and both at once. A layer whose data the earlier output lacks, and one whose earlier
output turns out damaged while it is copied, are downloaded after all, without an error.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.image import reading
from buildkit.image.convert import convert, convert_many
from buildkit.registry import source as registry_source
from buildkit.storage.store import Store
from tests.integration.hostile_images import oci_layout, sha
from tests.integration.test_convert_incremental import BASE, CHANGES, _top

IMAGES = {"base": BASE, "a": [*BASE, _top("a")], "b": [*BASE, _top("b")], "delete": [*BASE, _top("delete")],
          "link": [*BASE, _top("link")]}


def _blob(layer: bytes) -> str:
    return sha(gzip.compress(layer, mtime=0))  # what oci_layout writes and the registry then serves


def _name(layers: list[bytes]) -> str:
    return next(name for name, image in IMAGES.items() if image == layers)


@pytest.fixture(scope="module")
def pushed(registry, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Every image pushed once, with gzip layers: name → docker:// SOURCE."""
    work = tmp_path_factory.mktemp("images")
    repo = f"{registry.host}/ckit-test/incremental-{uuid.uuid4().hex[:8]}"
    for name, layers in IMAGES.items():
        layout = oci_layout(work / name, layers)
        subprocess.run(["skopeo", "copy", "-q", "--dest-tls-verify=false", layout, f"docker://{repo}:{name}"],  # noqa: S607
                       check=True, capture_output=True)
    return {name: f"docker://{repo}:{name}" for name in IMAGES}


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Blob digest → bytes fetched, for every layer the conversions download."""
    seen: dict[str, int] = {}
    real = registry_source.blob_chunks

    def counting(client, repository, digest, size):  # type: ignore[no-untyped-def]
        seen.setdefault(digest, 0)
        for chunk in real(client, repository, digest, size):
            seen[digest] += len(chunk)
            yield chunk

    monkeypatch.setattr(registry_source, "blob_chunks", counting)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    yield seen


def _convert(source: str, target: str, store: Store):  # type: ignore[no-untyped-def]
    return convert(source, target, store=store, registry=registry_source.reader(insecure=True))


@pytest.mark.parametrize("target", ["sqsh", "sif"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_reconversion_downloads_only_the_changed_layer(change: str, target: str, pushed: dict[str, str],
                                                         fetched: dict[str, int], tmp_path: Path) -> None:
    before, now = CHANGES[change]
    store = Store(tmp_path / "store")
    _convert(pushed[_name(before)], target, store)
    fetched.clear()
    warm = _convert(pushed[_name(now)], target, store)
    top = gzip.compress(now[-1], mtime=0)
    assert fetched == {sha(top): len(top)}  # the base layers' blobs were not fetched at all
    assert warm.reused_bytes > 0
    fetched.clear()
    cold = _convert(pushed[_name(now)], target, Store(tmp_path / "cold"))
    assert set(fetched) == {_blob(layer) for layer in now}
    assert warm.path.read_bytes() == cold.path.read_bytes()


def test_both_targets_at_once_download_only_the_changed_layer(pushed: dict[str, str], fetched: dict[str, int],
                                                              tmp_path: Path) -> None:
    store, reader = Store(tmp_path / "store"), registry_source.reader(insecure=True)
    convert_many(pushed["a"], [("sif", None), ("sqsh", None)], store=store, registry=reader)
    fetched.clear()
    warm = convert_many(pushed["b"], [("sif", None), ("sqsh", None)], store=store, registry=reader)
    assert set(fetched) == {_blob(_top("b"))} and all(r.reused_bytes > 0 for r in warm)
    cold = convert_many(pushed["b"], [("sif", None), ("sqsh", None)], store=Store(tmp_path / "cold"), registry=reader)
    assert [r.path.read_bytes() for r in warm] == [r.path.read_bytes() for r in cold]


def test_base_data_the_earlier_output_lacks_is_downloaded(pushed: dict[str, str], fetched: dict[str, int],
                                                          tmp_path: Path) -> None:
    """The earlier image deleted base files that the new one keeps: those base layers are fetched after all."""
    store = Store(tmp_path / "store")
    _convert(pushed["delete"], "sqsh", store)
    fetched.clear()
    warm = _convert(pushed["a"], "sqsh", store)
    assert set(fetched) == {_blob(layer) for layer in IMAGES["a"]} and warm.reused_bytes > 0
    assert warm.path.read_bytes() == _convert(pushed["a"], "sqsh", Store(tmp_path / "cold")).path.read_bytes()


def test_an_earlier_output_found_damaged_while_copied_means_downloading(pushed: dict[str, str],
                                                                        fetched: dict[str, int], tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its records looked sound (the file's identity is unchanged) but a copied range fails its CRC32: the
    conversion starts again without it and downloads the layers it skipped, with no error. Those are not
    precompressed as they arrive (the writer is waiting for them and compresses them itself)."""
    followed: list[str] = []
    real = reading.Precompressor

    def counting(spool, growing, make, what, files, share=None):  # type: ignore[no-untyped-def]
        followed.append(what)
        return real(spool, growing, make, what, files, share)

    monkeypatch.setattr(reading, "Precompressor", counting)
    store = Store(tmp_path / "store")
    first = _convert(pushed["a"], "sqsh", store)
    st = first.path.stat()
    with first.path.open("r+b") as f:
        f.seek(4096 + 300)  # inside the first layer's data
        byte = f.read(1)
        f.seek(4096 + 300)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(first.path, ns=(st.st_atime_ns, st.st_mtime_ns))
    fetched.clear()
    followed.clear()
    warm = _convert(pushed["b"], "sqsh", store)
    assert set(fetched) == {_blob(layer) for layer in IMAGES["b"]}
    assert warm.reused_bytes == 0 and [w.split(" (")[0] for w in followed] == ["layer 3"]
    assert warm.path.read_bytes() == _convert(pushed["b"], "sqsh", Store(tmp_path / "cold")).path.read_bytes()
