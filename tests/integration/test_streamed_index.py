"""A registry's layers have their tar headers read while they arrive; the index merges them in layer order and
takes a layer's members only once its digest has matched.

The images are pushed by skopeo to the test registry (or served by the scripted one of :mod:`.test_streamed_pull`
with a tampered byte) and converted in-process, with spies counting the work: which layers were indexed from the
members read while streaming, and how often a complete spool's headers were read again.
"""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from buildkit.image.layers import tarscan
from tests.integration.hostile_images import entry, oci_layout, tar_bytes
from tests.integration.test_streamed_pull import PIECE, HostileServer, Registry, listing

LOWER = [entry("opt", "dir"), entry("opt/gone", data=b"whited out\n"), entry("opt/kept", data=b"kept\n"),
         entry("opt/cache", "dir"), entry("opt/cache/old", data=b"old\n"), entry("opt/big", data=os.urandom(400_000)),
         entry("etc", "dir"), entry("etc/conf", data=b"v1\n")]
MIDDLE = [entry("opt", "dir"), entry("opt/.wh.gone"), entry("opt/cache", "dir"), entry("opt/cache/.wh..wh..opq"),
          entry("opt/cache/new", data=b"new\n"), entry("etc", "dir"), entry("etc/.wh.conf")]
UPPER = [entry("etc", "dir"), entry("etc/conf", data=b"v3\n"), entry("opt", "dir"),
         entry("opt/gone", "symlink", target="kept"), entry("opt/link", "link", target="opt/kept")]


def push(registry, tmp_path: Path, layers: list[bytes]) -> str:  # type: ignore[no-untyped-def]
    ref = f"{registry.host}/ckit/streamed-index:{uuid.uuid4().hex[:8]}"
    subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", oci_layout(tmp_path / "layout", layers),  # noqa: S607
                    f"docker://{ref}"], check=True, capture_output=True)
    return ref


def count_headers(monkeypatch) -> list[bytes]:  # type: ignore[no-untyped-def]
    """Every tar header read (its checksum checked), by any reader of the process."""
    seen: list[bytes] = []
    real = tarscan._checksum_ok

    def counted(buf: bytes) -> bool:
        seen.append(bytes(buf[:100]))
        return real(buf)

    monkeypatch.setattr(tarscan, "_checksum_ok", counted)
    return seen


def test_layers_indexed_while_they_arrive_merge_in_layer_order(registry, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                               monkeypatch) -> None:
    """Layer 1 arrives last, after the whiteouts and the opaque directory of layers 2 and 3 have been read: the
    merge still applies them in layer order, every layer from its streamed members (no spool's headers read
    again), and the image is byte for byte the one made by reading the complete spools."""
    from buildkit.image import reading
    from buildkit.image.convert import convert
    from buildkit.image.layers import flatten
    from buildkit.image.layers.headerscan import HeaderScan
    from buildkit.registry.source import reader
    from buildkit.storage.store import Store

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv("CKIT_PULL_PIECE", str(PIECE))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    ref = push(registry, tmp_path, [tar_bytes(LOWER), tar_bytes(MIDDLE), tar_bytes(UPPER)])
    arrived = {1: threading.Event(), 2: threading.Event()}
    get, add_layer, scan = reading.LayerReader.get, flatten.Tree.add_layer, flatten.scan
    streamed: list[bool] = []
    rescans: list[str] = []

    def late_first(self, number, share=None, critical=False, scan=False):  # type: ignore[no-untyped-def]
        if number == 0:
            assert all(done.wait(60) for done in arrived.values())
        try:
            return get(self, number, share, critical, scan)
        finally:
            if number in arrived:
                arrived[number].set()

    def counted(self, layer, keep=None, scanned=None):  # type: ignore[no-untyped-def]
        streamed.append(scanned is not None)
        return add_layer(self, layer, keep, scanned)

    monkeypatch.setattr(reading.LayerReader, "get", late_first)
    monkeypatch.setattr(flatten.Tree, "add_layer", counted)
    monkeypatch.setattr(flatten, "scan", lambda f, start, end, what, **kw: rescans.append(what) or scan(f, start, end,
                                                                                                        what, **kw))
    headers = count_headers(monkeypatch)
    fast = convert(f"docker://{ref}", "sqsh", store=Store(tmp_path / "a"), registry=reader())
    assert streamed == [True, True, True] and rescans == []
    read_once = len(headers)
    headers.clear()
    for n, layer in enumerate((LOWER, MIDDLE, UPPER)):
        data, path = tar_bytes(layer), tmp_path / f"l{n}.tar"
        path.write_bytes(data)
        with path.open("rb") as f:
            list(tarscan.scan(f, 0, len(data), "layer"))
    assert read_once == len(headers)  # the precompressors take their files from the one reading of the headers
    monkeypatch.setattr(HeaderScan, "columns", lambda self, tar: None)  # every spool's headers read once complete
    streamed.clear()
    whole = convert(f"docker://{ref}", "sqsh", store=Store(tmp_path / "b"), registry=reader())
    assert streamed == [False, False, False] and len(rescans) == 3
    assert fast.path.read_bytes() == whole.path.read_bytes()
    listed = listing(fast.path)
    assert "/opt/gone -> kept" in listed and "/opt/cache/new" in listed and "/opt/cache/old" not in listed
    assert "/etc/conf" in listed and " 400000 " in listed
    assert subprocess.run(["unsquashfs", "-cat", str(fast.path), "etc/conf"], capture_output=True,  # noqa: S607
                          check=True).stdout == b"v3\n"


def test_a_tampered_layer_read_while_streaming_counts_for_nothing(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Its headers are read as it arrives (the tampered byte is in file data), yet the digest check fails first:
    no members are taken, nothing is published (exit 4 at the CLI: ``test_a_tampered_range_leaves_no_file_and_exits_4``)."""
    from buildkit.errors import IntegrityError
    from buildkit.image.convert import convert
    from buildkit.image.layers.headerscan import HeaderScan
    from buildkit.registry.source import reader
    from buildkit.storage.store import Store

    monkeypatch.setenv("CKIT_PULL_PIECE", str(PIECE))
    monkeypatch.setenv("CKIT_HTTP_RETRIES", "0")
    scans: list[HeaderScan] = []
    taken: list[object] = []
    init, columns = HeaderScan.__init__, HeaderScan.columns

    def made(self, *args):  # type: ignore[no-untyped-def]
        scans.append(self)
        init(self, *args)

    monkeypatch.setattr(HeaderScan, "__init__", made)
    monkeypatch.setattr(HeaderScan, "columns", lambda self, tar: taken.append(columns(self, tar)))
    server_registry = Registry(tamper_at=3 * PIECE + 100)
    with HostileServer(server_registry) as server, pytest.raises(IntegrityError, match="does not match its digest"):
        convert(f"docker://{server.host}/ckit/streamed:1", "sqsh", store=Store(tmp_path / "store"), registry=reader())
    assert len(scans) == 1 and taken == []  # scanned while it arrived, never asked for its members
    assert not list((tmp_path / "store").rglob("*.sqsh"))
