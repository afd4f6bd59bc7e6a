"""``ckit convert`` on real images with layer edge cases, checked against independent tools.

The test image is built through the docker SDK on the podman service: whiteouts, an opaque dir, hardlinks
across layers (one whose target is later replaced), a uid 1000 file, a suid file, a symlink chain and a
file replaced by a directory. It is converted from the engine, from a docker-archive and from an OCI
layout (skopeo), and the trees are compared with ``umoci raw unpack`` of the same image.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from buildkit.image import produce as produce_mod
from buildkit.image.convert import convert
from buildkit.image.model import ImageConfig
from buildkit.image.rootfs import charliecloud as charliecloud_rootfs
from buildkit.image.rootfs import enroot as enroot_rootfs
from buildkit.image.sif.read import read_sif
from buildkit.image.sources.docker_daemon import DaemonSource
from buildkit.image.squashfs import superblock as squashfs
from buildkit.registry.source import reader
from buildkit.storage.store import Store
from tests.infra.containers import remove_images

EDGE_REPO = "localhost/ckit-convert-edge"
DOCKERFILE = """\
FROM {base}
RUN mkdir -p /opt/olddir /opt/work && echo gone > /opt/gone.txt && echo a > /opt/olddir/a \\
 && echo b > /opt/olddir/b && echo original > /opt/hl-src && echo file > /opt/replace-me && echo keep > /opt/keep
RUN rm /opt/gone.txt && rm -rf /opt/olddir && mkdir /opt/olddir && echo c > /opt/olddir/c \\
 && ln /opt/hl-src /opt/hl-link && echo owned > /opt/owned && chown 1000:1000 /opt/owned \\
 && echo suid > /opt/suid && chmod 4755 /opt/suid && ln -s chain2 /opt/chain1 && ln -s keep /opt/chain2 \\
 && rm /opt/replace-me && mkdir /opt/replace-me && echo inside > /opt/replace-me/inside
RUN rm /opt/hl-src && echo replaced > /opt/hl-src
ENV FOO=bar GREETING="hello world"
WORKDIR /opt/work
LABEL org.ckit.test="edge"
ENTRYPOINT ["/bin/echo", "ep"]
CMD ["default arg"]
"""
ENROOT_FILES = ("etc/rc", "etc/rc.local", "etc/fstab", "etc/environment")


def run(*argv: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)  # noqa: S603


@pytest.fixture(scope="module")
def edge_image(busybox_image: str) -> Iterator[str]:
    client = docker.from_env()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        data = DOCKERFILE.format(base=busybox_image).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    ref = f"{EDGE_REPO}:{uuid.uuid4().hex[:8]}"  # this run's own name: other test runs share the podman store
    client.images.build(fileobj=context, custom_context=True, tag=ref, rm=True)
    yield ref
    remove_images(client, [ref])


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("convert")


@pytest.fixture(scope="module")
def archive(edge_image: str, work: Path) -> Path:
    path = work / "edge.tar"
    with path.open("wb") as out:
        for chunk in docker.from_env().images.get(edge_image).save(named=True):
            out.write(chunk)
    return path


@pytest.fixture(scope="module")
def layout(edge_image: str, work: Path) -> Path:
    path = work / "layout"
    run("skopeo", "copy", f"containers-storage:{edge_image}", f"oci:{path}:edge")
    return path


@pytest.fixture(scope="module")
def reference_tree(layout: Path, work: Path) -> Path:
    """The image as umoci flattens it (independent of ckit)."""
    rootfs = work / "umoci-rootfs"
    run("umoci", "raw", "unpack", "--rootless", "--image", f"{layout}:edge", str(rootfs))
    return rootfs


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "cache")


def tree(root: Path, *, fixperms: bool = False, skip: tuple[str, ...] = ()) -> dict[str, tuple]:
    """path → (type, mode, size, link target, sha256) for every entry under ``root``."""
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            full = Path(folder) / name
            rel = str(full.relative_to(root))
            if rel in skip or rel.startswith("dev/"):
                continue
            st = full.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if fixperms:  # what enroot import does before squashing: chmod -R u+rX, dirs u+w
                mode |= 0o400 | (0o100 if stat.S_ISDIR(st.st_mode) or mode & 0o111 else 0)
                mode |= 0o200 if stat.S_ISDIR(st.st_mode) else 0
            kind = stat.S_IFMT(st.st_mode)
            digest = hashlib.sha256(full.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else ""
            target = os.readlink(full) if stat.S_ISLNK(st.st_mode) else ""
            size = st.st_size if stat.S_ISREG(st.st_mode) else 0
            out[rel] = (kind, mode, size, target, digest)
    return out


def unsquash(image: Path, dest: Path, offset: int = 0) -> Path:
    argv = ["unsquashfs", "-no-progress", "-d", str(dest)]
    if offset:
        argv += ["-o", str(offset)]
    run(*argv, str(image))
    return dest


def image_config(image_ref: str) -> ImageConfig:
    attrs = docker.from_env().images.get(image_ref).attrs
    return ImageConfig.from_image_config({"architecture": attrs.get("Architecture"), "config": attrs["Config"]})


@pytest.fixture(scope="module")
def pushed(edge_image: str, registry) -> str:  # type: ignore[no-untyped-def]
    ref = f"{registry.host}/ckit/convert-edge:1"
    run("skopeo", "copy", "--dest-tls-verify=false", f"containers-storage:{edge_image}", f"docker://{ref}")
    return ref


@pytest.fixture(params=["daemon", "archive", "oci", "registry"])
def source(request: pytest.FixtureRequest, edge_image: str) -> Iterator[str]:
    if request.param == "registry":
        yield f"docker://{request.getfixturevalue('pushed')}"
    elif request.param == "daemon":
        yield f"docker-daemon:{edge_image}"
    elif request.param == "archive":
        yield f"docker-archive:{request.getfixturevalue('archive')}"
    else:
        yield f"oci:{request.getfixturevalue('layout')}:edge"


def enroot_uri(source: str) -> str:
    """What `enroot import` records as provenance: its URI for a registry or an engine; nothing for a tar or an
    OCI layout (enroot cannot import those, and their host path is private)."""
    if source.startswith("docker-daemon:"):
        return "dockerd://" + source.removeprefix("docker-daemon:")
    if source.startswith("docker://"):
        host, _, rest = source.removeprefix("docker://").partition("/")
        return f"docker://{host}#{rest}"
    return ""


def test_sqsh_tree_equals_umoci_flattening(source: str, reference_tree: Path, store: Store, tmp_path: Path,
                                           edge_image: str) -> None:
    result = convert(source, "sqsh", output=tmp_path / "edge.sqsh", store=store, registry=reader())
    assert not result.cache_hit and result.compression == "zstd:-3"
    extracted = unsquash(result.path, tmp_path / "x")
    ours = tree(extracted, skip=ENROOT_FILES)
    theirs = tree(reference_tree, fixperms=True, skip=ENROOT_FILES)
    # the tree of `enroot import` (umoci's flattening, enroot's fixperms), plus Charliecloud's files and the
    # mount points ch-run needs where the image has none: nothing of the image itself differs
    charliecloud = {e.path.lstrip("/"): e for e in charliecloud_rootfs.entries(image_config(edge_image))}
    assert {p: ours[p] for p in theirs} == theirs
    assert set(ours) - set(theirs) == {p for p in charliecloud if p not in theirs} >= {"ch/environment", "mnt/0"}
    for name in ("ch/environment", "ch/metadata.json"):
        assert (extracted / name).read_bytes() == charliecloud[name].data, name
    # the edge cases really are in the image, and came out as overlayfs shows them
    assert not (extracted / "opt/gone.txt").exists()
    assert sorted(os.listdir(extracted / "opt/olddir")) == ["c"]
    assert (extracted / "opt/hl-link").read_text() == "original\n"
    assert (extracted / "opt/hl-src").read_text() == "replaced\n"
    assert (extracted / "opt/replace-me/inside").read_text() == "inside\n"
    assert os.readlink(extracted / "opt/chain1") == "chain2"
    assert (extracted / "opt/chain1").read_text() == "keep\n"
    suid = (extracted / "opt/suid").lstat()
    assert suid.st_mode & stat.S_ISUID
    # all-root, like `enroot import`
    assert {(p.lstat().st_uid, p.lstat().st_gid) for p in extracted.rglob("*")} == {(0, 0)}
    # the four Enroot files, byte for byte what enroot_rootfs produces for this config
    expected = {e.path.lstrip("/"): e.data for e in enroot_rootfs.entries(
        image_config(edge_image), provenance=enroot_uri(source)) if e.kind == "file"}
    for name in ENROOT_FILES:
        assert (extracted / name).read_bytes() == expected[name], name
    assert b"exec '/bin/echo' 'ep' 'default arg'" in (extracted / "etc/rc").read_bytes()


def test_sif_is_valid_and_runs_like_apptainer(archive: Path, store: Store, tmp_path: Path) -> None:
    result = convert(f"docker-archive:{archive}", "sif", output=tmp_path / "edge.sif", store=store)
    listing = run("siftool", "list", str(result.path)).stdout
    assert "Def.FILE" in listing and "JSON.Generic" in listing and "FS (Squashfs/*System/amd64)" in listing
    assert "bootstrap: docker-archive" in run("siftool", "dump", "1", str(result.path)).stdout
    oci_config = json.loads(run("siftool", "dump", "2", str(result.path)).stdout)
    assert oci_config["Entrypoint"] == ["/bin/echo", "ep"]
    part = read_sif(result.path).primary_partition()
    assert part is not None
    info = run("siftool", "info", str(part.id), str(result.path)).stdout
    assert f"Offset:       {part.offset}" in info or str(part.offset) in info
    root = unsquash(result.path, tmp_path / "x", offset=part.offset)
    owned = (root / "opt/owned").lstat()
    assert (owned.st_uid, owned.st_gid) == (1000, 1000)  # a SIF keeps the image's owners
    for name in (".singularity.d/runscript", ".singularity.d/env/10-docker2singularity.sh",
                 ".singularity.d/labels.json", ".singularity.d/actions/run", ".singularity.d/Singularity"):
        assert (root / name).is_file(), name
    assert os.readlink(root / "singularity") == ".singularity.d/runscript"
    assert (root / "etc/hosts").read_bytes() == b""
    labels = json.loads((root / ".singularity.d/labels.json").read_text())
    assert labels["org.ckit.test"] == "edge"
    # ENTRYPOINT + CMD without arguments; CMD replaced, ENTRYPOINT kept with arguments
    assert run("chroot", str(root), "/.singularity.d/runscript").stdout == "ep default arg\n"
    env = {"PATH": "/bin", "HOME": "/home/u"}
    runscript = [shutil.which("chroot") or "chroot", str(root), "/.singularity.d/runscript", "a  b", "$HOME"]
    assert run(*runscript, env=env).stdout == "ep a  b /home/u\n"  # apptainer's historic eval
    assert run(*runscript, env={**env, "SINGULARITY_NO_EVAL": "1"}).stdout == "ep a  b $HOME\n"
    env = run(runscript[0], str(root), "/bin/sh", "-c", ". /.singularity.d/env/10-docker2singularity.sh; "
              'echo "$FOO|$GREETING"', env={"PATH": "/bin", "FOO": "from-host"}).stdout
    assert env == "from-host|hello world\n"  # the host value wins over the image default


def test_reproducible_with_source_date_epoch(archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    for target in ("sif", "sqsh"):
        a = convert(f"docker-archive:{archive}", target, store=Store(tmp_path / "a"))
        b = convert(f"docker-archive:{archive}", target, store=Store(tmp_path / "b"))
        assert a.path.read_bytes() == b.path.read_bytes(), target


def test_a_warm_store_never_serves_bytes_made_without_source_date_epoch(archive: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "store")
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    for target in ("sif", "sqsh"):
        convert(f"docker-archive:{archive}", target, store=store)  # the store is warm, without the variable
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    for target in ("sif", "sqsh"):
        warm = convert(f"docker-archive:{archive}", target, store=store)
        cold = convert(f"docker-archive:{archive}", target, store=Store(tmp_path / f"cold-{target}"))
        assert not warm.cache_hit, target
        assert warm.path.read_bytes() == cold.path.read_bytes(), target
        assert convert(f"docker-archive:{archive}", target, store=store).cache_hit  # now it is in the store


def test_the_superblock_is_dated_by_source_date_epoch_or_zero(archive: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, the superblock says 0, so the same image gives the same squashfs on every run."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    for target in ("sqsh", "sif"):
        result = convert(f"docker-archive:{archive}", target, store=Store(tmp_path / f"now-{target}"))
        offset = 0 if target == "sqsh" else read_sif(result.path).primary_partition().offset  # type: ignore[union-attr]
        assert squashfs.check(result.path, offset).mkfs_time == 0, target
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    for target in ("sqsh", "sif"):
        result = convert(f"docker-archive:{archive}", target, store=Store(tmp_path / f"fixed-{target}"))
        offset = 0 if target == "sqsh" else read_sif(result.path).primary_partition().offset  # type: ignore[union-attr]
        assert squashfs.check(result.path, offset).mkfs_time == 1700000000, target


def test_second_convert_is_a_cache_hit_without_work(edge_image: str, store: Store, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A hit reads no layer and writes no squashfs (counted, not timed: the machine is shared)."""
    first = convert(f"docker-daemon:{edge_image}", "sqsh", store=store)
    work: list[str] = []
    real_materialize, real_produce = DaemonSource.materialize, produce_mod.produce
    monkeypatch.setattr(DaemonSource, "materialize",
                        lambda self, *a, **k: work.append("materialize") or real_materialize(self, *a, **k))
    monkeypatch.setattr(produce_mod, "produce", lambda *a, **k: work.append("produce") or real_produce(*a, **k))
    second = convert(f"docker-daemon:{edge_image}", "sqsh", output=tmp_path / "again.sqsh", store=store)
    assert not first.cache_hit and second.cache_hit
    assert work == []
    assert (tmp_path / "again.sqsh").read_bytes() == first.path.read_bytes()
    assert len(store.entries()) == 1


def test_site_restricts_compression(archive: Path, store: Store) -> None:
    from buildkit.site import load_site

    site = load_site("twnia2")
    assert site.squashfs_compressions and "zstd" not in site.squashfs_compressions
    result = convert(f"docker-archive:{archive}", "sif", site=site, store=store)
    assert result.compression.split(":")[0] in site.squashfs_compressions
    assert "Compression gzip" in run("unsquashfs", "-s", "-o", str(read_sif(result.path).primary_partition().offset),
                                     str(result.path)).stdout


@pytest.mark.parametrize("compress", ["gzip:1", "xz:0", "zstd:-7", "zstd:1"])
def test_every_compression_ckit_writes_unpacks_with_unsquashfs(compress: str, archive: Path, store: Store) -> None:
    """enroot create (Pyxis) unpacks with squashfs-tools' unsquashfs: every kind of setting must pass it."""
    result = convert(f"docker-archive:{archive}", "sqsh", compress=compress, store=store)
    listing = run("unsquashfs", "-lls", str(result.path)).stdout
    assert "squashfs-root/etc/rc" in listing and "squashfs-root/opt/suid" in listing
