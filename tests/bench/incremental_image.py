"""The benchmark image of ``bench_incremental``: a Debian root from ``mmdebstrap`` split into layers by path,
PyTorch's CPU wheel as one more, and a 50 MB top layer in two versions, as an OCI layout; built once and cached
in ``~/.cache/ckit-bench`` (``CKIT_BENCH_CACHE``)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

from tests.bench import sh

CACHE = Path(os.environ.get("CKIT_BENCH_CACHE", Path.home() / ".cache" / "ckit-bench"))
MIRROR = os.environ.get("CKIT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ("llvm-14-dev,clang-14,openjdk-17-jdk-headless,rustc,libstd-rust-dev,g++,gfortran,python3-scipy,"
            "python3-pandas,python3-matplotlib,libopenblas-dev")
LAYERS = (  # path prefixes of layers 2…5; layer 1 holds the rest and every directory
    ("usr/lib/x86_64-linux-gnu/",),
    ("usr/lib/llvm-14/", "usr/include/llvm-14/"),
    ("usr/lib/python3/", "usr/lib/python3.11/"),
    ("usr/lib/jvm/", "usr/lib/rustlib/", "usr/lib/gcc/"),
)
WHEEL = Path(os.environ.get("CKIT_BENCH_WHEEL") or next(iter(sorted(Path("/opt/wheels").glob("torch-*.whl"))),
                                                          Path("/nonexistent")))
SITE = "usr/local/lib/python3.11/dist-packages/"
TOP_FROM, TOP_SIZE = "usr/lib/python3/dist-packages/", 50 << 20
NOT_IN_PYTHON_TREE = LAYERS[1] + LAYERS[3]
EPOCH = "1700000000"


def rootfs() -> Path:
    """The mmdebstrap root as a tar, made once (temp file, then rename)."""
    tag = hashlib.sha256(f"{PACKAGES} {MIRROR}".encode()).hexdigest()[:12]
    path = CACHE / f"bookworm-{tag}.tar"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            print(f"building the bench root with mmdebstrap into {path} (a few minutes, once)", file=sys.stderr)
            # --format: mmdebstrap picks the format from the name, and the temporary name does not end in .tar
            sh("mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar", "--quiet", f"--include={PACKAGES}",
               "bookworm", str(tmp), MIRROR, timeout=3600)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    return path


def _layer_of(name: str, member: tarfile.TarInfo, links: dict[str, int]) -> int:
    if member.islnk():
        return links.get(member.linkname.removeprefix("./"), 0)
    if member.isdir():
        return 0
    return next((n for n, prefixes in enumerate(LAYERS, 1) if name.startswith(prefixes)), 0)


def _split(root: Path, work: Path) -> tuple[list[Path], list[tuple[str, bytes]]]:
    """The root split into layer tars by path, and the files of the top layer."""
    paths = [work / f"layer{n}.tar" for n in range(len(LAYERS) + 1)]
    outs = [tarfile.open(p, "w", format=tarfile.PAX_FORMAT) for p in paths]  # noqa: SIM115
    links: dict[str, int] = {}
    top: list[tuple[str, bytes]] = []
    top_size = 0
    try:
        with tarfile.open(root) as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                layer = _layer_of(name, member, links)
                links[name] = layer
                data = tar.extractfile(member) if member.isreg() else None
                if data is not None and name.startswith(TOP_FROM) and top_size < TOP_SIZE:
                    content = data.read()
                    top.append((name[len(TOP_FROM):], content))
                    top_size += len(content)
                    data = io.BytesIO(content)
                outs[layer].addfile(member, data)
    finally:
        for out in outs:
            out.close()
    return paths, top


def _top(files: list[tuple[str, bytes]], variant: str, path: Path) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        names = ["opt/app", *sorted({f"opt/app/{n}".rsplit("/", 1)[0] for n, _ in files} - {"opt/app"})]
        for name in sorted(set(names)):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(EPOCH)
            tar.addfile(info)
        for n, (name, data) in enumerate(files):
            if variant == "b" and n % 10 == 0:
                data += b"\n# changed for the next iteration\n"
            info = tarfile.TarInfo(f"opt/app/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, int(EPOCH)
            tar.addfile(info, io.BytesIO(data))
        if variant == "b":
            info = tarfile.TarInfo("opt/app/NEW")
            info.size, info.mtime = 4, int(EPOCH)
            tar.addfile(info, io.BytesIO(b"new\n"))
    return path


def layout() -> Path:
    """The OCI layout (uncompressed layers) with tags ``a`` and ``b``, made once."""
    root = rootfs()
    path = CACHE / f"layout-{root.stem}-{WHEEL.stem if WHEEL.is_file() else 'no-wheel'}"
    if (path / "index.json").exists():
        return path
    tmp = CACHE / f".layout-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "blobs" / "sha256").mkdir(parents=True)
    layers, top = _split(root, tmp)
    if WHEEL.is_file():
        layers.append(_wheel_layer(WHEEL, tmp / "wheel.tar"))
    manifests = []
    for tag in ("a", "b"):
        blobs = [_blob(tmp, p) for p in [*layers, _top(top, tag, tmp / f"top-{tag}.tar")]]
        config = json.dumps({"architecture": "amd64", "os": "linux", "created": "2023-11-14T22:13:20Z",
                             "config": {"Cmd": ["/bin/bash"]},
                             "rootfs": {"type": "layers", "diff_ids": [d for d, _ in blobs]}}).encode()
        manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                          "digest": _put(tmp, config), "size": len(config)},
                               "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d,
                                           "size": s} for d, s in blobs]}).encode()
        manifests.append({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _put(tmp, manifest),
                          "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": tag}})
    (tmp / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests}))
    (tmp / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    tmp.rename(path)
    return path


def _wheel_layer(wheel: Path, path: Path) -> Path:
    """A wheel unpacked into the image's site-packages, as ``pip install`` would lay it out."""
    import zipfile

    with zipfile.ZipFile(wheel) as zf, tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for item in zf.infolist():
            if item.is_dir():
                continue
            name = SITE + item.filename
            for n in range(SITE.count("/") + 1, name.count("/") + 1):
                parent = "/".join(name.split("/")[:n])
                if parent not in dirs:
                    dirs.add(parent)
                    info = tarfile.TarInfo(parent)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(EPOCH)
                    tar.addfile(info)
            info = tarfile.TarInfo(name)
            info.size, info.mtime = item.file_size, int(EPOCH)
            info.mode = (item.external_attr >> 16) & 0o7777 or 0o644
            with zf.open(item) as data:
                tar.addfile(info, data)
    return path


def _blob(layout_dir: Path, tar: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    with tar.open("rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    target = layout_dir / "blobs" / "sha256" / digest.hexdigest()
    if not target.exists():
        os.link(tar, target)
    return f"sha256:{digest.hexdigest()}", tar.stat().st_size


def _put(layout_dir: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (layout_dir / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}"
