"""Hostile images written byte by byte: tar layers, OCI layouts and docker archives for the adversary suite.

Every builder writes exactly what it is told (a wrong digest, a symlinked blob, an uncompressed layer, a sha512
layout), so a test can hand ckit input that no well-behaved tool would write.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import uuid
from pathlib import Path

SENTINEL = f"ckit-hostile-{uuid.uuid4().hex[:12]}"


def entry(name: str, kind: str = "file", data: bytes = b"", target: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                 "link": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE}[kind]
    info.mode = 0o755 if kind == "dir" else 0o644
    info.linkname, info.size = target, len(data)
    info.devmajor, info.devminor = (8, 0) if kind in ("chr", "blk") else (0, 0)
    return info, data


def tar_bytes(entries: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


def sha(data: bytes, algorithm: str = "sha256") -> str:
    return f"{algorithm}:" + hashlib.new(algorithm, data).hexdigest()


def config_blob(layers: list[bytes]) -> bytes:
    return json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
                       "rootfs": {"type": "layers", "diff_ids": [sha(t) for t in layers]}}).encode()


def oci_layout(path: Path, layers: list[bytes], *, compress: bool = True, algorithm: str = "sha256") -> str:
    """An OCI layout of ``layers`` (gzip unless ``compress`` is False), every blob named by ``algorithm``."""
    blobs = path / "blobs" / algorithm
    blobs.mkdir(parents=True)

    def put(data: bytes) -> str:
        digest = sha(data, algorithm)
        (blobs / digest.split(":")[1]).write_bytes(data)
        return digest

    packed = [gzip.compress(t, mtime=0) for t in layers] if compress else list(layers)  # the same bytes every time
    layer_type = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
    config = config_blob(layers)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(config),
                   "size": len(config)},
        "layers": [{"mediaType": layer_type, "digest": put(p), "size": len(p)} for p in packed]}).encode()
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": put(manifest), "size": len(manifest),
        "annotations": {"org.opencontainers.image.ref.name": "hostile"}}]}
    (path / "index.json").write_text(json.dumps(index))
    (path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return f"oci:{path}:hostile"


def docker_archive(path: Path, layers: list[bytes]) -> str:
    with tarfile.open(path, "w") as tar:
        files = {"config.json": config_blob(layers)}
        files.update({f"l{i}/layer.tar": t for i, t in enumerate(layers)})
        files["manifest.json"] = json.dumps([{"Config": "config.json", "RepoTags": ["hostile:1"],
                                              "Layers": [f"l{i}/layer.tar" for i in range(len(layers))]}]).encode()
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return f"docker-archive:{path}"




def layout_manifest(layout: Path) -> tuple[dict, Path]:
    """The (only) manifest of a layout written by :func:`oci_layout`, and its blob path."""
    desc = json.loads((layout / "index.json").read_text())["manifests"][0]
    algorithm, _, hexdigest = desc["digest"].partition(":")
    path = layout / "blobs" / algorithm / hexdigest
    return json.loads(path.read_text()), path


def layer_blob(layout: Path, number: int = 0) -> Path:
    manifest, _ = layout_manifest(layout)
    algorithm, _, hexdigest = manifest["layers"][number]["digest"].partition(":")
    return layout / "blobs" / algorithm / hexdigest


# --- tar written byte by byte ----------------------------------------------------------------------------------
def octal(value: int, width: int) -> bytes:
    return f"{value:0{width - 1}o}".encode() + b"\0"


def base256(value: int, width: int) -> bytes:
    """GNU's base-256 number field (a negative value in two's complement, first byte 0xff)."""
    raw = (value % (1 << (8 * width))).to_bytes(width, "big")
    return (b"\xff" if value < 0 else b"\x80") + raw[1:]


def header(name: str, *, kind: bytes = b"0", size: int = 0, size_field: bytes | None = None, mode: int = 0o644,
           uid: int = 0, gid: int = 0, linkname: str = "", mode_field: bytes | None = None) -> bytes:
    """One ustar header block with a correct checksum, whatever its fields say."""
    block = bytearray(512)
    block[0:100] = name.encode().ljust(100, b"\0")[:100]
    block[100:108] = mode_field if mode_field is not None else octal(mode, 8)
    block[108:116], block[116:124] = octal(uid, 8), octal(gid, 8)
    block[124:136] = size_field if size_field is not None else octal(size, 12)
    block[136:148] = octal(1_700_000_000, 12)
    block[156:157] = kind
    block[157:257] = linkname.encode().ljust(100, b"\0")[:100]
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}".encode() + b"\0 "
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def member(name: str, data: bytes = b"", **fields: object) -> bytes:
    return header(name, size=len(data), **fields) + padded(data)  # type: ignore[arg-type]


def pax(records: dict[str, str] | bytes) -> bytes:
    """A PAX extended header (type x) with these records (or these raw bytes)."""
    if isinstance(records, dict):
        body = b""
        for key, value in records.items():
            text = f" {key}={value}\n".encode()
            length = len(text) + len(str(len(text)))
            length += len(str(length)) - len(str(len(text)))
            body += str(length).encode() + text
    else:
        body = records
    return header("././@PaxHeader", kind=b"x", size=len(body)) + padded(body)


END = bytes(1024)
