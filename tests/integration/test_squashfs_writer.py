"""The squashfs writer, read back by every reader a user meets: the Linux kernel (loop mount, what
singularity and setuid apptainer use), ``squashfuse`` (unprivileged apptainer), squashfs-tools' ``unsquashfs``
(``enroot create``, so Pyxis) and squashfs-tools-ng (``sqfsdiff`` against ``tar2sqfs`` on the same tar).

The layer holds what stresses the format: files around the block size, incompressible data, zero blocks
(stored as holes), a hardlink group, xattrs (binary ``security.capability``, ``user.*``) on files and a
directory, uids above 65535, suid/sgid/sticky bits, a FIFO, a long symlink, non-ASCII names, one directory
whose listing needs more than 256 entries and an extended inode, and enough files to span many metadata
blocks.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildkit.errors import ConvertError
from buildkit.image.layers.flatten import as_layer_tars, flatten
from buildkit.image.squashfs.superblock import read_superblock
from buildkit.image.squashfs.writer import BLOCK_SIZE, Ownership, write

CAPABILITY = "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
MTIME = 1_700_000_000


def _entries() -> list[tuple[tarfile.TarInfo, bytes]]:
    out: list[tuple[tarfile.TarInfo, bytes]] = []
    noise = random.Random(7).randbytes  # incompressible, and the same on every call

    def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", mode: int = 0o644, uid: int = 0,
            gid: int = 0, link: str = "", pax: dict[str, str] | None = None) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.uid, info.gid, info.mtime, info.linkname = kind, mode, uid, gid, MTIME, link
        info.size = len(data) if kind == tarfile.REGTYPE else 0
        info.pax_headers = pax or {}
        out.append((info, data))

    add("sizes", tarfile.DIRTYPE, mode=0o755)
    for size in (0, 1, BLOCK_SIZE - 1, BLOCK_SIZE, BLOCK_SIZE + 1, 3 * BLOCK_SIZE + 17):
        add(f"sizes/f{size}", data=hashlib.sha256(str(size).encode()).digest() * (size // 32 + 1))
    add("sizes/random", data=noise(5 * BLOCK_SIZE + 99), mode=0o600)
    add("sizes/zeros", data=bytes(4 * BLOCK_SIZE))
    add("sizes/holes", data=bytes(BLOCK_SIZE) + b"a" * BLOCK_SIZE + bytes(2 * BLOCK_SIZE) + b"b" * 100)
    add("links", tarfile.DIRTYPE, mode=0o755)
    add("links/one", data=b"shared by three names\n", mode=0o4755, uid=1000)
    add("links/two", tarfile.LNKTYPE, link="links/one")
    add("links/three", tarfile.LNKTYPE, link="links/one")
    add("links/big", data=noise(2 * BLOCK_SIZE))
    add("links/big-again", tarfile.LNKTYPE, link="links/big")
    add("attrs", tarfile.DIRTYPE, mode=0o1777, pax={"SCHILY.xattr.user.dir": "on a directory"})
    add("attrs/ping", data=b"\x7fELF", mode=0o755,
        pax={"SCHILY.xattr.security.capability": CAPABILITY, "SCHILY.xattr.user.comment": "pings"})
    add("attrs/ping2", data=b"\x7fELF2", mode=0o755, pax={"SCHILY.xattr.security.capability": CAPABILITY})
    add("attrs/owned", data=b"big ids", mode=0o2750, uid=70000, gid=70001)
    add("attrs/fifo", tarfile.FIFOTYPE, mode=0o600)
    add("attrs/long-link", tarfile.SYMTYPE, link="/" + "/".join(["component"] * 30))
    add("attrs/grüße-ünïcode", data="grüße\n".encode())
    add("wide", tarfile.DIRTYPE, mode=0o755)
    for n in range(400):  # 400 entries of 200-byte names: > 256 per header, a listing over 64 KiB
        add(f"wide/{n:04d}-" + "x" * 195, data=f"{n}\n".encode())
    add("many", tarfile.DIRTYPE, mode=0o755)
    for n in range(40):
        add(f"many/d{n:02d}", tarfile.DIRTYPE, mode=0o750)
        for m in range(50):
            add(f"many/d{n:02d}/f{m:02d}", data=f"{n}/{m}\n".encode() * (m + 1))
    return out


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layer") / "layer.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in _entries():
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return path


@pytest.fixture(scope="module")
def image(layer: Path) -> Path:
    out = layer.with_name("ckit.sqsh")
    write(flatten(as_layer_tars([layer]), mtime=MTIME), out, "zstd", 1, mkfs_time=MTIME)
    return out


@pytest.fixture(scope="module")
def mounted(image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    where = tmp_path_factory.mktemp("kernel")
    subprocess.run(["mount", "-t", "squashfs", "-o", "loop,ro", str(image), str(where)], check=True)  # noqa: S603, S607
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)  # noqa: S603, S607


def _expected_tree() -> dict[str, tuple]:
    """path → (kind, mode, uid, gid, content digest or link target, xattrs) as the layer says."""
    result: dict[str, tuple] = {"": ("dir", 0o755, 0, 0, None, {})}
    data_of: dict[str, bytes] = {}
    for info, data in _entries():
        xattrs = {k.removeprefix("SCHILY.xattr."): v.encode("utf-8", "surrogateescape")
                  for k, v in info.pax_headers.items()}
        if info.type == tarfile.LNKTYPE:
            result[info.name] = result[info.linkname]
            continue
        kind = {tarfile.DIRTYPE: "dir", tarfile.SYMTYPE: "symlink", tarfile.FIFOTYPE: "fifo"}.get(info.type, "file")
        detail = hashlib.sha256(data).hexdigest() if kind == "file" else info.linkname or None
        data_of[info.name] = data
        mode = 0o777 if kind == "symlink" else info.mode
        result[info.name] = (kind, mode, info.uid, info.gid, detail, xattrs)
    return result


def _walk(root: Path) -> dict[str, tuple]:
    """The same view of a real directory tree (a mount or an extraction)."""
    result: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in ["", *dirnames, *filenames] if Path(dirpath) == root else [*dirnames, *filenames]:
            full = Path(dirpath) / name if name else root
            rel = str(full.relative_to(root)) if full != root else ""
            st = full.lstat()
            if stat.S_ISDIR(st.st_mode):
                kind, detail = "dir", None
            elif stat.S_ISLNK(st.st_mode):
                kind, detail = "symlink", os.readlink(full)
            elif stat.S_ISFIFO(st.st_mode):
                kind, detail = "fifo", None
            else:
                kind, detail = "file", hashlib.sha256(full.read_bytes()).hexdigest()
            xattrs = {} if kind == "symlink" else {k: os.getxattr(full, k, follow_symlinks=False)
                                                   for k in os.listxattr(full, follow_symlinks=False)}
            result[rel] = (kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, detail, xattrs)
    return result


def test_the_kernel_mounts_it_and_sees_exactly_the_layer(mounted: Path) -> None:
    assert _walk(mounted) == _expected_tree()


def test_hardlinks_are_one_inode_with_the_right_link_count(mounted: Path) -> None:
    one, two, three = (mounted / "links" / n for n in ("one", "two", "three"))
    assert one.stat().st_ino == two.stat().st_ino == three.stat().st_ino
    assert one.stat().st_nlink == 3
    assert (mounted / "links/big").stat().st_ino == (mounted / "links/big-again").stat().st_ino
    assert (mounted / "many").stat().st_nlink == 2 + 40  # a directory counts its subdirectories
    assert all(f.stat().st_mtime == MTIME for f in (one, mounted / "wide", mounted / "attrs/fifo"))


@pytest.fixture(scope="module")
def reference(layer: Path) -> Path:
    """squashfs-tools-ng's ``tar2sqfs`` on the same layer tar."""
    out = layer.with_name("tar2sqfs.sqsh")
    with layer.open("rb") as stdin:
        subprocess.run(["tar2sqfs", "--quiet", "--no-skip", "--defaults", f"mtime={MTIME}", "-c", "zstd",  # noqa: S603, S607
                        str(out)],
                       stdin=stdin, check=True)
    return out


def _fuse_view(image: Path, where: Path) -> dict[str, tuple]:
    where.mkdir()
    subprocess.run(["squashfuse", str(image), str(where)], check=True)  # noqa: S603, S607
    try:
        return _walk(where)
    finally:
        subprocess.run(["fusermount3", "-u", str(where)], check=True)  # noqa: S603, S607


def test_squashfuse_reads_it_as_it_reads_tar2sqfs_output(image: Path, reference: Path, tmp_path: Path) -> None:
    """squashfuse 0.1.105 names security.* xattrs trusted.* (for tar2sqfs's images too): compare with those."""
    seen = _fuse_view(image, tmp_path / "ckit")
    assert seen == _fuse_view(reference, tmp_path / "ref")
    assert seen["links/one"] == _expected_tree()["links/one"] and len(seen) == len(_expected_tree())


def test_unsquashfs_extracts_it(image: Path, tmp_path: Path) -> None:
    out = tmp_path / "x"
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(out), str(image)], check=True,  # noqa: S603, S607
                   stdout=subprocess.DEVNULL)
    assert _walk(out) == _expected_tree()


def test_same_contents_as_tar2sqfs_on_the_same_tar(image: Path, reference: Path) -> None:
    diff = subprocess.run(["sqfsdiff", "--timestamps", "-a", str(reference), "-b", str(image)],  # noqa: S603, S607
                          capture_output=True, text=True, check=False)
    assert diff.returncode == 0, diff.stdout + diff.stderr


def test_superblock_and_bytes_are_reproducible(layer: Path, image: Path, tmp_path: Path) -> None:
    with image.open("rb") as f:
        sb = read_superblock(f)
    assert (sb.compression, sb.block_size, sb.mkfs_time) == ("zstd", BLOCK_SIZE, MTIME)
    assert image.stat().st_size % 4096 == 0 and sb.bytes_used <= image.stat().st_size
    again = tmp_path / "again.sqsh"
    write(flatten(as_layer_tars([layer]), mtime=MTIME), again, "zstd", 1, mkfs_time=MTIME, jobs=3)
    assert again.read_bytes() == image.read_bytes()  # thread count and timing never change the bytes


@pytest.mark.parametrize("algo, level", [("gzip", 1), ("gzip", 9), ("xz", 0), ("zstd", 19), ("zstd", -3), ("zstd", -7),
                                         ("lz4", 1), ("lz4", 9)])
def test_every_codec_mounts(algo: str, level: int, layer: Path, tmp_path: Path) -> None:
    out = tmp_path / f"{algo}.sqsh"
    write(flatten(as_layer_tars([layer]), mtime=MTIME), out, algo, level)
    where = tmp_path / "m"
    where.mkdir()
    subprocess.run(["mount", "-t", "squashfs", "-o", "loop,ro", str(out), str(where)], check=True)  # noqa: S603, S607
    try:
        assert _walk(where) == _expected_tree()
    finally:
        subprocess.run(["umount", str(where)], check=True)  # noqa: S603, S607


def test_all_root_and_enroot_permissions(layer: Path, tmp_path: Path) -> None:
    out = tmp_path / "root.sqsh"
    write(flatten(as_layer_tars([layer]), mtime=MTIME), out, "zstd", 1, own=Ownership(all_root=True, fixperms=True))
    listing = subprocess.run(["unsquashfs", "-lln", str(out)], check=True, capture_output=True,  # noqa: S603, S607
                             text=True).stdout
    rows = {line.split()[-1].removeprefix("squashfs-root/"): line.split()[:2] for line in listing.splitlines()
            if "squashfs-root/" in line and " -> " not in line}
    assert rows["attrs/owned"] == ["-rwxr-s---", "0/0"]  # u+rX: executable for the group, so for the owner too
    assert rows["sizes/random"] == ["-rw-------", "0/0"]
    assert rows["many/d00"] == ["drwxr-x---", "0/0"]


NAMES = st.text(alphabet=st.sampled_from("abcXYZ019-_.é漢 "), min_size=1, max_size=12).map(
    lambda n: n.strip() or "x").filter(lambda n: n not in (".", "..") and not n.startswith(".wh."))
SIZES = st.sampled_from([0, 1, 100, BLOCK_SIZE - 1, BLOCK_SIZE, BLOCK_SIZE + 1, 2 * BLOCK_SIZE + 7, 9 * BLOCK_SIZE])
FILLS = st.sampled_from(["noise", "zeros", "text"])


@st.composite
def trees(draw: st.DrawFn) -> list[tuple[str, str, object, int, int]]:
    """(path, kind, payload, mode, uid) in tar order: parents first; payload is bytes, a link target or None."""
    dirs, files, out = [""], [], []
    for n in range(draw(st.integers(1, 25))):
        parent = draw(st.sampled_from(dirs))
        name = draw(NAMES)
        path = f"{parent}/{name}".lstrip("/")
        if any(p == path for p, *_ in out):
            continue
        kind = draw(st.sampled_from(["dir", "file", "file", "symlink", "hardlink"] if files else ["dir", "file"]))
        mode, uid = draw(st.sampled_from([0o755, 0o644, 0o4755, 0o600, 0o1777])), draw(st.sampled_from([0, 1000, 70000]))
        if kind == "dir":
            dirs.append(path)
            out.append((path, "dir", None, mode, uid))
        elif kind == "file":
            size, fill = draw(SIZES), draw(FILLS)
            data = {"noise": random.Random(n).randbytes(size), "zeros": bytes(size),
                    "text": (f"{n} line\n".encode() * (size // 7 + 1))[:size]}[fill]
            files.append(path)
            out.append((path, "file", data, mode, uid))
        elif kind == "symlink":
            out.append((path, "symlink", draw(st.sampled_from(["/etc/passwd", "../x", draw(NAMES)])), 0o777, 0))
        else:
            out.append((path, "hardlink", draw(st.sampled_from(files)), 0, 0))
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=trees())
def test_any_tree_reads_back_exactly(entries: list[tuple[str, str, object, int, int]], tmp_path: Path) -> None:
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    layer, expected = work / "layer.tar", {"": ("dir", 0o755, 0, 0, None, {})}
    with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
        for path, kind, payload, mode, uid in entries:
            info = tarfile.TarInfo(path)
            info.mode, info.uid, info.gid, info.mtime = mode, uid, uid, MTIME
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                expected[path] = ("dir", mode, uid, uid, None, {})
            elif kind == "file":
                assert isinstance(payload, bytes)
                info.size = len(payload)
                expected[path] = ("file", mode, uid, uid, hashlib.sha256(payload).hexdigest(), {})
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(payload)
                expected[path] = ("symlink", 0o777, uid, uid, payload, {})
            else:
                info.type, info.linkname = tarfile.LNKTYPE, str(payload)
                expected[path] = expected[str(payload)]
            tar.addfile(info, io.BytesIO(payload) if kind == "file" else None)  # type: ignore[arg-type]
    image, out = work / "image.sqsh", work / "x"
    write(flatten(as_layer_tars([layer]), mtime=MTIME), image, "zstd", 1)
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(out), str(image)], check=True,  # noqa: S603, S607
                   stdout=subprocess.DEVNULL)
    assert _walk(out) == expected


def test_a_layer_that_shrinks_after_indexing_is_a_clear_error(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        for name, size in (("big", 3 * BLOCK_SIZE), ("small", 10)):
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(range(256)) * (size // 256) + b"x" * (size % 256)))
    tree = flatten(as_layer_tars([layer]), mtime=MTIME)
    os.truncate(layer, 1024)  # changed under ckit's feet between the two passes
    with pytest.raises(ConvertError, match="layer 1: the layer ended early"):
        write(tree, tmp_path / "out.sqsh", "zstd", 1)


WIDE = 20_000


def _wide_names() -> list[str]:
    return [f"lib{n:05d}-{'x' * (n % 40)}.so.{n % 7}" for n in range(WIDE)]


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A directory of 20,000 files: ckit's image of it, and mksquashfs's of the same tree."""
    work = tmp_path_factory.mktemp("wide")
    layer, tree = work / "layer.tar", work / "tree"
    with tarfile.open(layer, "w") as tar:
        for name in ["big", *(f"big/{n}" for n in _wide_names())]:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if name == "big" else tarfile.REGTYPE
            info.mode, info.mtime = 0o755, MTIME
            data = name.encode()
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    write(flatten(as_layer_tars([layer]), mtime=MTIME), work / "ckit.sqsh", "zstd", 1, mkfs_time=MTIME)
    tree.mkdir()
    subprocess.run(["tar", "-C", str(tree), "-xf", str(layer)], check=True)  # noqa: S603, S607
    subprocess.run(["mksquashfs", str(tree), str(work / "mksquashfs.sqsh"), "-noappend", "-quiet",  # noqa: S603, S607
                    "-no-progress", "-comp", "zstd"], check=True)
    return work / "ckit.sqsh", work / "mksquashfs.sqsh"


def _index(image: Path) -> list[tuple[str, int]]:
    """The directory index of /big as squashfs-tools-ng's ``rdsquashfs --stat`` shows it: (name, header offset)."""
    shown = subprocess.run(["rdsquashfs", "-s", "/big", str(image)], check=True, capture_output=True,  # noqa: S603, S607
                           text=True).stdout
    return [(line.split("'")[1], int(line.rsplit(" ", 1)[1])) for line in shown.splitlines()
            if line.startswith("\t'") and "header offset" in line]


def test_a_large_directory_has_an_index_as_mksquashfs_writes_it(wide: tuple[Path, Path]) -> None:
    ours, theirs = (_index(image) for image in wide)
    assert len(ours) >= 0.95 * len(theirs) > 90  # an entry per 8 KiB of listing, like mksquashfs
    names = [name for name, _ in ours]
    assert names == sorted(names, key=lambda n: n.encode()) and set(names) <= set(_wide_names())
    offsets = [0] + [at for _, at in ours]
    assert all(0 < b - a <= 8192 + 300 for a, b in zip(offsets, offsets[1:], strict=False))


def test_every_reader_looks_up_every_name_through_the_index(wide: tuple[Path, Path], tmp_path: Path) -> None:
    image = wide[0]
    names = _wide_names()
    probes = ["a", "lib", "lib00000-", "lib10000-" + "x" * 50, "lib19999", "zzz", "lib20000-.so.0"]
    for mount, unmount in ((["mount", "-t", "squashfs", "-o", "loop,ro"], ["umount"]),
                           (["squashfuse"], ["fusermount3", "-u"])):
        where = tmp_path / mount[0]
        where.mkdir()
        subprocess.run([*mount, str(image), str(where)], check=True)  # noqa: S603
        try:
            big = where / "big"
            assert sorted(os.listdir(big)) == sorted(names)
            for name in names:  # every lookup by name: the index sends each one to the right header
                assert (big / name).stat().st_size == len(f"big/{name}"), (mount[0], name)
            for name in names[::997]:
                assert (big / name).read_bytes() == f"big/{name}".encode()
            assert not any((big / probe).exists() for probe in probes)
        finally:
            subprocess.run([*unmount, str(where)], check=True)  # noqa: S603
    listing = subprocess.run(["unsquashfs", "-l", "-d", "", str(image)], check=True, capture_output=True,  # noqa: S603, S607
                             text=True).stdout.split()
    assert sorted(p for p in listing if p.startswith("/big/")) == sorted(f"/big/{n}" for n in names)
