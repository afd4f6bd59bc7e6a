"""ckit's SIF writer checked by the reference tools: siftool (sylabs' Go implementation) and unsquashfs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildkit import process
from buildkit.image.sif import text as T
from buildkit.image.sif import write as S
from tests.testdata import sif_dir

pytestmark = pytest.mark.integration
DATA = sif_dir()


@pytest.fixture
def squashfs(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "hello.txt").write_text("hello from ckit\n")
    (tree / "bin").mkdir()
    (tree / "bin" / "big").write_bytes(os.urandom(300_000))
    out = tmp_path / "root.sqsh"
    process.run(["mksquashfs", tree, out, "-noappend", "-comp", "gzip", "-no-progress", "-quiet"])
    return out


def write(out: Path, squashfs: Path, source_date_epoch: int | None = None) -> S.SifFile:
    S.write_apptainer_sif(out, deffile=b"bootstrap: docker\nfrom: busybox:latest\n\n",
                          oci_config=b'{"Cmd":["/bin/sh"]}', squashfs=squashfs, arch="amd64",
                          source_date_epoch=source_date_epoch)
    return S.read_sif(out)


def test_siftool_accepts_an_apptainer_style_sif(tmp_path: Path, squashfs: Path) -> None:
    out = tmp_path / "image.sif"
    sif = write(out, squashfs)
    env = {"TZ": "UTC"}
    listing = process.run(["siftool", "list", out], env=env).stdout
    assert listing == T.format_list(sif)
    assert "|FS (Squashfs/*System/amd64)" in listing and "|JSON.Generic" in listing and "|Def.FILE" in listing
    assert process.run(["siftool", "header", out], env=env).stdout == T.format_header(sif)
    info = process.run(["siftool", "info", "3", out], env=env).stdout
    assert info == T.format_info(sif.descriptor(3))
    assert "Partition Type:   *System" in info
    dumped = tmp_path / "dumped.sqsh"
    with open(dumped, "wb") as sink, process.stream_stdout(["siftool", "dump", "3", out]) as proc:
        assert proc.stdout is not None
        while block := proc.stdout.read(1 << 16):
            sink.write(block)
    assert dumped.read_bytes() == squashfs.read_bytes()
    assert process.run(["siftool", "dump", "2", out]).stdout == '{"Cmd":["/bin/sh"]}'
    offset = sif.descriptor(3).offset
    files = process.run(["unsquashfs", "-o", str(offset), "-l", out]).stdout
    assert "squashfs-root/etc/hello.txt" in files and "squashfs-root/bin/big" in files
    cat = process.run(["unsquashfs", "-o", str(offset), "-cat", out, "etc/hello.txt"]).stdout
    assert cat == "hello from ckit\n"


def test_source_date_epoch_makes_sif_byte_identical(tmp_path: Path, squashfs: Path) -> None:
    a, b = tmp_path / "a.sif", tmp_path / "b.sif"
    write(a, squashfs, 1700000000)
    write(b, squashfs, 1700000000)
    assert a.read_bytes() == b.read_bytes()
    header = process.run(["siftool", "header", a]).stdout
    assert "ID:" not in header and "Created At:" not in header
    write(b, squashfs)
    assert a.read_bytes() != b.read_bytes()


@pytest.mark.parametrize("name", ["busybox_amd64.sif", "busybox_ppc64le.sif", "sylabs/two-groups-signed-pgp.sif",
                                  "sylabs/one-group-signed-legacy-all.sif"])
def test_reader_agrees_with_siftool_on_real_files(name: str) -> None:
    path = DATA / name
    sif = S.read_sif(path)
    env = {"TZ": "UTC"}
    assert process.run(["siftool", "list", path], env=env).stdout == T.format_list(sif)
    assert process.run(["siftool", "header", path], env=env).stdout == T.format_header(sif)
    for d in sif.descriptors:
        assert process.run(["siftool", "info", str(d.id), path], env=env).stdout == T.format_info(d)


def test_real_partition_lists_with_unsquashfs() -> None:
    path = DATA / "busybox_amd64.sif"
    part = S.read_sif(path).primary_partition()
    assert part is not None
    listing = process.run(["unsquashfs", "-o", str(part.offset), "-l", path]).stdout
    assert "squashfs-root/.singularity.d/runscript" in listing
