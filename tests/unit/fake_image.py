"""Small real images made in memory for unit tests: layers as tar bytes, served as a registry would stream them
(:class:`StreamedSource`: the I/O edge faked, everything behind it real) or written as an OCI layout."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

from buildkit.image.sources.base import Identity, LayerBlob, Materialized, Source

# name -> file bytes; None: a directory; "->target": a symlink; "=>target": a hardlink; "|": a fifo;
# (bytes, {xattr: value}): a file with extended attributes
Tree = dict[str, "bytes | str | tuple[bytes, dict[str, str]] | None"]


def noise(size: int, seed: int) -> bytes:
    """Bytes that compress a little (as real files do): random words from a small vocabulary."""
    rng = random.Random(seed)
    words = [bytes(rng.choices(b"abcdefghijklmnop", k=rng.randint(2, 9))) for _ in range(300)]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


def layer_tar(files: Tree, mtime: int = 1_700_000_000) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid = mtime, 1000, 1000
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif content == "|":
                info.type, info.mode = tarfile.FIFOTYPE, 0o600
                tar.addfile(info)
            elif isinstance(content, str):
                info.type = tarfile.LNKTYPE if content.startswith("=>") else tarfile.SYMTYPE
                info.linkname = content[2:]
                tar.addfile(info)
            elif isinstance(content, tuple):
                data, attrs = content
                info.size, info.mode = len(data), 0o755
                info.pax_headers = {f"SCHILY.xattr.{key}": value for key, value in attrs.items()}
                tar.addfile(info, io.BytesIO(data))
            else:
                info.size, info.mode = len(content), 0o644
                tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def sample_layers() -> list[bytes]:
    """Three layers: large files (several squashfs blocks: what precompression takes), small ones (fragments),
    a file replaced, one deleted by a whiteout, symlinks, hardlinks, a fifo and extended attributes."""
    return [
        layer_tar({"usr": None, "usr/lib": None, "usr/lib/big.so": noise(700_000, 1),
                   "usr/lib/small.txt": b"small\n" * 10, "etc": None, "etc/os-release": b"ID=fake\n",
                   "usr/lib/link": "->big.so", "usr/lib/hard": "=>usr/lib/small.txt", "run": None, "run/fifo": "|",
                   "usr/bin": None, "usr/bin/ping": (b"ELF" * 100, {"security.capability": "\x01\x00\x00\x02",
                                                                   "user.note": "kept", "trusted.overlay.x": "y"})}),
        layer_tar({"opt": None, "opt/model.bin": noise(400_000, 2), "usr": None, "usr/lib": None,
                   "usr/lib/small.txt": b"replaced\n", "usr/lib/.wh.link": b""}),
        layer_tar({"opt": None, "opt/data": None, **{f"opt/data/f{n}": noise(3000 + n, n) for n in range(20)},
                   "opt/other.bin": noise(260_000, 3)}),
    ]


def config(layers: list[bytes], env: list[str] | None = None) -> bytes:
    return json.dumps({
        "architecture": "amd64", "os": "linux", "created": "2024-01-02T03:04:05Z",
        "config": {"Env": env or ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(t).hexdigest() for t in layers]},
    }).encode()


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class StreamedSource(Source):
    """An image whose gzipped layers arrive as chunks, as a registry's do (``docker://``)."""

    def __init__(self, layers: list[bytes], chunk: int = 64 << 10, name: str = "fake") -> None:
        self.text, self.image_ref = f"docker://registry.invalid/{name}:1", f"registry.invalid/{name}:1"
        self.layers = layers
        self.blobs = [gzip.compress(t, compresslevel=1, mtime=0) for t in layers]
        self.config = config(layers)
        self.chunk = chunk
        self.streams = 0  # layers streamed: a test counts work

    def identify(self) -> Identity:
        return Identity(self.config, digest(self.config))

    def _chunks(self, blob: bytes) -> Callable[[], Iterator[bytes]]:
        def chunks() -> Iterator[bytes]:
            self.streams += 1
            for at in range(0, len(blob), self.chunk):
                yield blob[at:at + self.chunk]
        return chunks

    def materialize(self, workdir: Path, progress: Callable[[int], None] | None = None) -> Materialized:
        return Materialized(self.config, [
            LayerBlob(workdir / f"layer-{n}.tar", 0, len(blob), f"layer {n}", digest=digest(blob),
                      chunks=self._chunks(blob))
            for n, blob in enumerate(self.blobs, start=1)])


def oci_layout(path: Path, layers: list[bytes], tag: str = "1", compress: bool = True) -> Path:
    """``layers`` as an OCI image layout at ``path`` (gzipped unless ``compress`` is false)."""
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(data: bytes) -> dict[str, object]:
        (blobs / digest(data).removeprefix("sha256:")).write_bytes(data)
        return {"digest": digest(data), "size": len(data)}

    cfg = config(layers)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **put(cfg)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else ""),
                    **put(gzip.compress(t, mtime=0) if compress else t)} for t in layers],
    }).encode()
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", **put(manifest),
        "annotations": {"org.opencontainers.image.ref.name": tag}}]}
    (path / "index.json").write_text(json.dumps(index))
    (path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return path


def tar_of(members: dict[str, bytes], path: Path) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def docker_archive(path: Path, images: dict[str, list[bytes]]) -> Path:
    """A ``docker save`` tar of ``images`` (tag -> layers), each layer an uncompressed member."""
    members: dict[str, bytes] = {}
    manifest = []
    for tag, layers in images.items():
        cfg = config(layers)
        members[f"{digest(cfg)[7:]}.json"] = cfg
        names = []
        for layer in layers:
            names.append(f"{digest(layer)[7:]}/layer.tar")
            members[names[-1]] = layer
        manifest.append({"Config": f"{digest(cfg)[7:]}.json", "RepoTags": [tag], "Layers": names})
    members["manifest.json"] = json.dumps(manifest).encode()
    return tar_of(members, path)
