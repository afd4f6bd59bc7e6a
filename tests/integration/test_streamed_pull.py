"""``docker://`` conversions stream: a layer is fetched in byte ranges (several at once) where the registry serves
them, decompressed as it arrives and verified before anything is published.

A scripted registry on loopback (:mod:`.hostile_registry`) serves a small image whose one gzip layer is larger
than two pieces (``CKIT_PULL_PIECE`` is set to its 64 KiB minimum): with ranges, without them (a 200 for a
ranged GET), with a tampered byte in a middle range, and with a wrong ``Content-Range``. The real registry's
answers to range requests are covered by ``test_real_registry_serves_the_layer_in_ranges``.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from buildkit.image import reading
from buildkit.image.layers.growing import Growing
from tests.integration.hostile_images import config_blob, entry, oci_layout, sha, tar_bytes
from tests.integration.hostile_registry import HostileServer, Reply, Seen

PIECE = 64 << 10
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def image() -> tuple[bytes, bytes, bytes]:
    """manifest, config, layer blob: random file data, so the gzip layer is about 5 pieces long."""
    tar = tar_bytes([entry("bin", "dir"), entry("data", data=os.urandom(5 * PIECE)), entry("etc", "dir")])
    layer = gzip.compress(tar, mtime=0)
    config = config_blob([tar])
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(config),
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": sha(layer),
                    "size": len(layer)}]}).encode()
    return manifest, config, layer


class Registry:
    """Serves one image; ``ranges`` says how it answers a ranged GET; ``served`` alters the layer bytes sent."""

    def __init__(self, ranges: str = "yes", tamper_at: int | None = None, slow: bool = True) -> None:
        self.manifest, self.config, self.layer = image()
        self.ranges, self.tamper_at, self.slow = ranges, tamper_at, slow

    def served(self) -> bytes:
        if self.tamper_at is None:
            return self.layer
        data = bytearray(self.layer)
        data[self.tamper_at] ^= 0xFF  # same size, different bytes
        return bytes(data)

    def __call__(self, request: Seen) -> Reply:
        if request.path == "/v2/":
            return 200, {}, b"{}"
        if "/manifests/" in request.path:
            return 200, {"Content-Type": MANIFEST_TYPE, "Docker-Content-Digest": sha(self.manifest)}, self.manifest
        if request.path.endswith(sha(self.config)):
            return 200, {}, self.config
        if not request.path.endswith(sha(self.layer)):
            return 404, {}, b'{"errors": [{"code": "BLOB_UNKNOWN"}]}'
        data, wanted = self.served(), request.headers.get("range", "")
        if not wanted or self.ranges == "no":
            return 200, {}, data
        first, last = (int(n) for n in wanted.removeprefix("bytes=").split("-"))
        if first == 0 and self.slow:
            time.sleep(0.2)  # a slow first piece (320 KiB/s): pieces, several at once, are worth it
        shown = f"bytes {first}-{last}/{len(data)}" if self.ranges == "yes" else f"bytes 0-{last - first}/{len(data)}"
        return 206, {"Content-Range": shown}, data[first:last + 1]


def convert(tmp_path: Path, host: str, out: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "cwd").mkdir(exist_ok=True)
    env = {**os.environ, "CKIT_CACHE_DIR": str(tmp_path / "cache"), "CKIT_PULL_PIECE": str(PIECE),
           "CKIT_HTTP_RETRIES": "0"}
    return subprocess.run([sys.executable, "-m", "buildkit.cli", "convert", f"docker://{host}/ckit/streamed:1",  # noqa: S603
                           "--to", "sqsh", "-o", str(out)], capture_output=True, text=True, env=env,
                          cwd=tmp_path / "cwd", check=False)


def layer_gets(server: HostileServer, registry: Registry) -> list[Seen]:
    return [s for s in server.seen if s.method == "GET" and s.path.endswith(sha(registry.layer))]


def listing(path: Path) -> str:
    return subprocess.run(["unsquashfs", "-lls", str(path)], capture_output=True, text=True, check=True).stdout  # noqa: S607


def push_layers(host: str, tmp_path: Path, name: str, layers: list[bytes]) -> str:
    """The layers as an image in the registry (skopeo, gzip layers): its reference."""
    source = oci_layout(tmp_path / "layout", layers)
    ref = f"{host}/ckit/{name}:{uuid.uuid4().hex[:8]}"
    subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", source, f"docker://{ref}"],  # noqa: S607
                   check=True, capture_output=True)
    return ref


def spy_precompressed(monkeypatch: pytest.MonkeyPatch, count: Callable[[Any], int]) -> list[int]:
    """What the precompressors made, counted per conversion (``count`` of each layer's segment); each precompressor
    is let finish its layer, so the count does not race the writer."""
    made: list[int] = []
    precompressed = reading.LayerReader.precompressed

    def spied(self):  # type: ignore[no-untyped-def]
        result = precompressed(self)
        made.append(sum(count(segment) for _, segment in result.values()))
        return result

    monkeypatch.setattr(reading.LayerReader, "precompressed", spied)
    monkeypatch.setattr(Growing, "stop", lambda self: None)
    return made


def test_a_large_layer_is_fetched_in_ranges_and_converted(tmp_path: Path) -> None:
    registry = Registry()
    out = tmp_path / "out.sqsh"
    with HostileServer(registry) as server:
        done = convert(tmp_path, server.host, out)
        assert done.returncode == 0, done.stderr
        gets = layer_gets(server, registry)
    assert len(gets) == -(-len(registry.layer) // PIECE) >= 3  # one request per piece
    assert all(g.headers.get("range") for g in gets)
    assert " 327680 " in listing(out)  # the file whose bytes came in five ranges, whole


def test_a_fast_registry_is_read_as_two_ranged_streams(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """When the first piece comes faster than :data:`FAST` (0 here: always), the rest is one ranged answer."""
    from buildkit.image.convert import convert as convert_in_process
    from buildkit.registry.distribution import blobstream
    from buildkit.registry.source import reader
    from buildkit.storage.store import Store

    monkeypatch.setattr(blobstream, "FAST", 0)
    monkeypatch.setenv("CKIT_PULL_PIECE", str(PIECE))
    registry = Registry(slow=False)
    with HostileServer(registry) as server:
        result = convert_in_process(f"docker://{server.host}/ckit/streamed:1", "sqsh", store=Store(tmp_path / "s"),
                                    registry=reader())
        gets = layer_gets(server, registry)
    assert [g.headers.get("range") for g in gets] == [f"bytes=0-{PIECE - 1}",
                                                       f"bytes={PIECE}-{len(registry.layer) - 1}"]
    assert " 327680 " in listing(result.path)


def test_downloads_through_one_client_share_its_places(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two blobs fetched in pieces at once through one client hold no more pieces together than the client's
    places (two here), and both arrive whole: the bound belongs to the client, not to the process."""
    import threading

    from buildkit.registry.distribution import blobstream
    from buildkit.registry.distribution.client import RegistryClient

    monkeypatch.setattr(blobstream, "FAST", float("inf"))  # pieces, whatever the speed
    monkeypatch.setenv("CKIT_PULL_PIECE", str(PIECE))
    registry, held, most = Registry(slow=False), [0], [0]

    class Counted:
        def __init__(self) -> None:
            self._places, self._lock = threading.BoundedSemaphore(2), threading.Lock()

        def acquire(self, blocking: bool = True) -> bool:
            got = self._places.acquire(blocking)
            with self._lock:
                held[0] += got
                most[0] = max(most[0], held[0])
            return got

        def release(self) -> None:
            with self._lock:
                held[0] -= 1
            self._places.release()

    with HostileServer(registry) as server:
        client = RegistryClient(server.host, insecure=True, credentials=None)
        client.pieces = Counted()  # type: ignore[assignment]
        got: list[bytes] = [b"", b""]

        def fetch(n: int) -> None:
            for chunk in blobstream.blob_chunks(client, "ckit/streamed", sha(registry.layer), len(registry.layer)):
                got[n] += chunk
                time.sleep(0.01)  # a slow consumer: the pieces fetched ahead wait for it, holding their places

        threads = [threading.Thread(target=fetch, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert got == [registry.layer, registry.layer]
    assert most[0] == 2 and held[0] == 0


def test_a_registry_without_ranges_is_read_as_one_stream(tmp_path: Path) -> None:
    registry = Registry(ranges="no")
    out = tmp_path / "out.sqsh"
    with HostileServer(registry) as server:
        done = convert(tmp_path, server.host, out)
        assert done.returncode == 0, done.stderr
        assert len(layer_gets(server, registry)) == 1  # the answer to the first ranged GET was the whole blob
    assert " 327680 " in listing(out)


def test_a_tampered_range_leaves_no_file_and_exits_4(tmp_path: Path) -> None:
    registry = Registry(tamper_at=2 * PIECE + 100)  # inside the third piece, mid-stream
    out = tmp_path / "out.sqsh"
    with HostileServer(registry) as server:
        done = convert(tmp_path, server.host, out)
    assert done.returncode == 4, done.stderr
    assert "does not match its digest" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
    assert not list((tmp_path / "cache").rglob("*.sqsh"))  # nothing published in the store either


def test_a_wrong_content_range_is_refused(tmp_path: Path) -> None:
    registry = Registry(ranges="wrong")
    out = tmp_path / "out.sqsh"
    with HostileServer(registry) as server:
        done = convert(tmp_path, server.host, out)
    assert done.returncode == 1, done.stderr
    assert "Content-Range" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_real_registry_serves_the_layer_in_ranges(registry, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The distribution registry answers range requests (so the ranged path is the one taken), and the streamed
    pull of a pushed image converts."""
    import requests

    from tests.integration.hostile_images import layout_manifest, oci_layout

    tar = tar_bytes([entry("bin", "dir"), entry("data", data=os.urandom(6 * PIECE))])
    source = oci_layout(tmp_path / "layout", [tar])
    repo = f"ckit/streamed-{uuid.uuid4().hex[:8]}"
    subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", source, f"docker://{registry.host}/{repo}:1"],  # noqa: S607
                   check=True, capture_output=True)
    layer = layout_manifest(tmp_path / "layout")[0]["layers"][0]
    answer = requests.get(f"http://{registry.host}/v2/{repo}/blobs/{layer['digest']}", timeout=10,
                          headers={"Range": f"bytes={PIECE}-{2 * PIECE - 1}"})
    assert answer.status_code == 206 and len(answer.content) == PIECE
    (tmp_path / "cwd").mkdir()
    out = tmp_path / "out.sqsh"
    env = {**os.environ, "CKIT_CACHE_DIR": str(tmp_path / "cache"), "CKIT_PULL_PIECE": str(PIECE)}
    done = subprocess.run([sys.executable, "-m", "buildkit.cli", "convert", f"docker://{registry.host}/{repo}:1",  # noqa: S603
                           "--to", "sqsh", "-o", str(out)], capture_output=True, text=True, env=env,
                          cwd=tmp_path / "cwd", check=False)
    assert done.returncode == 0, done.stderr
    assert f" {6 * PIECE} " in listing(out)


def test_large_files_compressed_while_streaming_give_the_same_bytes(registry, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                    monkeypatch) -> None:
    """The files of a block or more are compressed while their layer arrives and copied by the writer: the image
    is byte for byte the one the writer makes alone, also when an upper layer replaces such a file (its copy is
    not used) and for the files the precompressor did not reach."""
    from buildkit.image.convert import convert
    from buildkit.registry.source import reader
    from buildkit.storage.store import Store

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv("CKIT_PULL_PIECE", str(PIECE))
    text = b"".join(b"line %d of a compressible file\n" % n for n in range(20000))
    lower = tar_bytes([entry("opt", "dir"), entry("opt/big", data=os.urandom(300_000)),
                       entry("opt/text", data=text), entry("opt/zeros", data=bytes(400_000)),
                       entry("opt/small", data=b"small\n")])
    upper = tar_bytes([entry("opt", "dir"), entry("opt/text", data=text[::-1]),
                       entry("opt/more", data=os.urandom(200_000))])
    ref = push_layers(registry.host, tmp_path, "precompressed", [lower, upper])
    made = spy_precompressed(monkeypatch, lambda segment: len(segment.files))
    with_pre = convert(f"docker://{ref}", "sqsh", store=Store(tmp_path / "a"), registry=reader())
    assert made == [5]  # big, text, zeros; text (again) and more: every file of a block or more
    monkeypatch.setattr(reading.LayerReader, "precompressed", lambda self: [p.result() for p in self._pre.values()] and {})
    alone = convert(f"docker://{ref}", "sqsh", store=Store(tmp_path / "b"), registry=reader())
    assert with_pre.path.read_bytes() == alone.path.read_bytes()
    assert (with_pre.compressed_bytes, with_pre.reused_bytes) == (alone.compressed_bytes, 0)
    listed = listing(with_pre.path)
    assert " 300000 " in listed and " 400000 " in listed and " 200000 " in listed


def test_the_largest_layer_starts_first_keeps_a_cpu_and_every_slot_comes_back(registry, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                              monkeypatch) -> None:
    """The writer waits for the last layer, so the largest one starts first and takes no CPU slot; the others
    and the precompressors take slots per piece of work, and all of them are free again at the end."""
    from buildkit.image.convert import convert
    from buildkit.registry.source import reader
    from buildkit.storage.store import Store
    from tests.integration.hostile_images import oci_layout

    monkeypatch.setenv("CKIT_PULL_PIECE", str(PIECE))
    layers = [tar_bytes([entry(f"l{n}", "dir"), entry(f"l{n}/data", data=os.urandom(size))])
              for n, size in enumerate((100_000, 700_000, 300_000))]
    ref = f"{registry.host}/ckit/shared-cpus:{uuid.uuid4().hex[:8]}"
    subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", oci_layout(tmp_path / "layout", layers),  # noqa: S607
                    f"docker://{ref}"], check=True, capture_output=True)
    calls: list[tuple[int, bool]] = []
    shares = []
    get = reading.LayerReader.get

    def spied(self, number, share=None, critical=False, scan=False):  # type: ignore[no-untyped-def]
        if share is not None:
            calls.append((number, critical))
            shares.append(share)
        return get(self, number, share, critical, scan)

    monkeypatch.setattr(reading.LayerReader, "get", spied)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    convert(f"docker://{ref}", "sqsh", store=Store(tmp_path / "store"), registry=reader())
    assert calls[0] == (1, True)  # the 700 kB layer, before layers 0 and 2
    assert sorted(calls[1:]) == [(0, False), (2, False)]
    share = shares[0]
    assert (share._free, share._reserved, list(share._waiting)) == (2, False, [])


def test_small_files_packed_while_streaming_give_the_same_bytes(registry, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                monkeypatch) -> None:
    """Small files are packed into fragment blocks while their layer arrives: a group whose files all survive is
    copied, one that lost a file to an upper layer's whiteout is unpacked and packed again, and the image is byte
    for byte the one the writer makes alone."""
    from buildkit.image.convert import convert
    from buildkit.registry.source import reader
    from buildkit.storage.store import Store

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setenv("CKIT_PULL_PIECE", str(PIECE))
    lower = tar_bytes([entry("lib", "dir"), *(entry(f"lib/m{n}.py", data=b"import os\n" * (500 + 37 * n) + os.urandom(n))
                                              for n in range(60))])
    upper = tar_bytes([entry("lib", "dir"), entry("lib/.wh.m7.py"), entry("lib/new.py", data=b"new\n")])
    ref = push_layers(registry.host, tmp_path, "fragments", [lower, upper])
    groups = spy_precompressed(monkeypatch, lambda segment: len(segment.groups))
    with_pre = convert(f"docker://{ref}", "sqsh", store=Store(tmp_path / "a"), registry=reader())
    assert groups[0] >= 3  # the lower layer's groups (m7.py's among them) and the upper layer's one
    monkeypatch.setattr(reading.LayerReader, "precompressed", lambda self: [p.result() for p in self._pre.values()] and {})
    alone = convert(f"docker://{ref}", "sqsh", store=Store(tmp_path / "b"), registry=reader())
    assert with_pre.path.read_bytes() == alone.path.read_bytes()
    assert (with_pre.compressed_bytes, with_pre.reused_bytes) == (alone.compressed_bytes, 0)
    listed = listing(with_pre.path)
    assert "/lib/m8.py" in listed and "/lib/m7.py" not in listed and "/lib/new.py" in listed
