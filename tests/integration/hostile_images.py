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
