"""SIF reader and writer against the reference files (../shared/testdata/sif, see its README)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from buildkit.errors import ConvertError
from buildkit.image.sif import write as S
from tests.testdata import sif_dir

DATA = sif_dir()
SYLABS = DATA / "sylabs"
ALL_SIFS = sorted(DATA.rglob("*.sif"))
LEGACY = {"busybox_amd64.sif", "busybox_arm64.sif", "busybox_ppc64le.sif", "one-group-signed-legacy-all.sif",
          "one-group-signed-legacy-group.sif", "one-group-signed-legacy.sif", "two-groups-signed-legacy-all.sif",
          "two-groups-signed-legacy-group.sif", "two-groups-signed-legacy.sif"}
V2_SIFS = [p for p in ALL_SIFS if p.name not in LEGACY]


def objects_of(sif: S.SifFile) -> list[S.SifObject]:
    """The inputs that produced a SIF file, taken back out of it."""
    return [
        S.SifObject(d.datatype, data=sif.read_object(d), name=d.name, group=d.group, linked=d.linked_raw,
                    fstype=d.fstype or 0, parttype=d.parttype or 0, arch=d.arch or "unknown",
                    extra=b"" if d.datatype == S.DATA_PARTITION or d.digest else d.extra.rstrip(b"\0"))
        for d in sif.descriptors
    ]


def test_the_test_data_is_complete() -> None:
    assert len(ALL_SIFS) == 24 and len(V2_SIFS) == 15


@pytest.mark.parametrize("path", V2_SIFS, ids=lambda p: p.name)
def test_writer_recreates_reference_images_byte_for_byte(path: Path) -> None:
    ref = S.read_sif(path)
    out = io.BytesIO()
    S.write_sif(out, objects=objects_of(ref), launch_script=ref.launch_script, created=ref.created, uuid=ref.id)
    assert out.getvalue() == path.read_bytes()


@pytest.mark.parametrize("path", ALL_SIFS, ids=lambda p: p.name)
def test_reader_reads_every_file_consistently(path: Path) -> None:
    sif = S.read_sif(path)
    size = path.stat().st_size
    assert sif.version == "01" and sif.descriptors_total == 48
    assert sif.descriptors_free == 48 - len(sif.descriptors)
    assert [d.id for d in sif.descriptors] == list(range(1, len(sif.descriptors) + 1))
    for d in sif.descriptors:
        assert sif.data_offset <= d.offset and d.offset + d.size <= size
    if sif.descriptors:
        assert sif.data_offset + sif.data_size == max(d.offset + d.size for d in sif.descriptors)
    assert sif.data_offset == (32768 if path.name in LEGACY else 32176)


@pytest.mark.parametrize(("name", "arch", "page"), [
    ("busybox_amd64.sif", "amd64", 4096), ("busybox_arm64.sif", "arm64", 4096),
    ("busybox_ppc64le.sif", "ppc64le", 65536)])
def test_reader_decodes_real_singularity_builds(name: str, arch: str, page: int) -> None:
    sif = S.read_sif(DATA / name)
    assert sif.launch_script == b"#!/usr/bin/env run-singularity\n"
    assert sif.arch == arch
    kinds = [(d.datatype_name, d.name) for d in sif.descriptors]
    assert kinds[:3] == [("Def.FILE", "."), ("JSON.Generic", "inspect-metadata.json"),
                         ("JSON.Generic", "oci-config.json")]
    assert kinds[4][0] == "Signature"
    part = sif.primary_partition()
    assert part is not None and part is sif.descriptors[3]
    assert (part.fstype, part.parttype, part.arch) == (S.FS_SQUASHFS, S.PART_PRIMSYS, arch)
    assert part.name.startswith("squashfs-")
    assert sif.read_object(part, 4) == b"hsqs"
    assert all(d.offset % page == 0 for d in sif.descriptors)
    deffile = sif.read_object(sif.descriptors[0]).decode()
    assert "busybox:1.33.1" in deffile
    sig = sif.descriptors[4]
    assert sig.group == 0 and sig.linked_to_group and sig.linked_id == 1
    assert sig.hashtype == 1 and len(sig.entity or "") == 40 and sig.entity != "0" * 40


def test_reader_decodes_type_specific_fields() -> None:
    blob = S.read_sif(SYLABS / "one-object-oci-blob.sif").descriptors[0]
    assert blob.digest == "sha256:a88b15e95042f7d5a1327c03c57e10bdc1cf5f5efc2968fc73c12b6f5b00c731"
    crypt = S.read_sif(SYLABS / "one-object-crypt-message.sif").descriptors[0]
    assert (crypt.formattype, crypt.messagetype) == (1, 0x100)
    assert S.read_sif(SYLABS / "one-object-sbom.sif").descriptors[0].sbom_format == 1
    legacy = S.read_sif(SYLABS / "one-group-signed-legacy.sif")
    sig = legacy.descriptors[-1]
    assert (sig.hashtype, sig.name, sig.uid, sig.linked_to_group) == (2, "part-signature", 1000, False)
    assert legacy.uuid.startswith("6ecc76b7")
    empty_id = S.read_sif(SYLABS / "empty-id.sif")
    assert empty_id.uuid == "3fa802cc-358b-45e3-bcc0-69dc7a45f9f8" and empty_id.arch == "unknown"


def _corrupt(tmp_path: Path, offset: int, data: bytes) -> Path:
    raw = bytearray((SYLABS / "one-group.sif").read_bytes())
    raw[offset:offset + len(data)] = data
    bad = tmp_path / "bad.sif"
    bad.write_bytes(bytes(raw))
    return bad


def test_reader_rejects_bad_magic_naming_the_file(tmp_path: Path) -> None:
    bad = _corrupt(tmp_path, 32, b"SIF_MAGIK")
    with pytest.raises(ConvertError, match=r"bad\.sif: not a SIF file \(bad magic"):
        S.read_sif(bad)


def test_reader_rejects_other_versions(tmp_path: Path) -> None:
    bad = _corrupt(tmp_path, 42, b"02")
    with pytest.raises(ConvertError, match=r"bad\.sif: unsupported SIF version '02'"):
        S.read_sif(bad)


def test_reader_rejects_short_and_truncated_files(tmp_path: Path) -> None:
    short = tmp_path / "short.sif"
    short.write_bytes(b"SIF_MAGIC")
    with pytest.raises(ConvertError, match="short.sif: not a SIF file"):
        S.read_sif(short)
    cut = tmp_path / "cut.sif"
    cut.write_bytes((SYLABS / "one-group.sif").read_bytes()[:5000])
    with pytest.raises(ConvertError, match="cut.sif: SIF descriptor table is truncated"):
        S.read_sif(cut)


def test_layout_follows_the_alignment_rules(tmp_path: Path) -> None:
    squash = tmp_path / "root.sqsh"
    squash.write_bytes(b"hsqs" + bytes(8188))
    deffile = b"bootstrap: docker\nfrom: alpine:3.19\n\n"
    out = io.BytesIO()
    S.write_sif(out, objects=[
        S.SifObject(S.DATA_DEFFILE, data=deffile),
        S.SifObject(S.DATA_GENERIC_JSON, data=b"{}", name="oci-config.json"),
        S.SifObject(S.DATA_PARTITION, path=squash, arch="arm64"),
    ], created=1700000000, uuid=bytes(range(16)))
    raw = out.getvalue()
    sif_path = tmp_path / "x.sif"
    sif_path.write_bytes(raw)
    sif = S.read_sif(sif_path)
    d, j, p = sif.descriptors
    assert (d.offset, d.size, j.offset, j.size) == (32176, 37, 32213, 2)
    assert (p.offset, p.size, p.size_with_padding) == (32768, 8192, 32768 - 32215 + 8192)
    assert len(raw) == 32768 + 8192 and raw[32215:32768] == bytes(32768 - 32215)
    assert raw[32768:] == squash.read_bytes()
    assert sif.arch == "arm64" and sif.arch_code == "04" and sif.created == sif.modified == 1700000000
    assert sif.data_size == 32768 + 8192 - 32176 and sif.uuid == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert p.extra[:11] == b"\x01\x00\x00\x00\x02\x00\x00\x00" + b"04\x00"
    assert (d.group_raw, d.linked_raw, d.created) == (0xF0000001, 0, 1700000000)


def test_writer_refuses_what_the_format_cannot_hold() -> None:
    with pytest.raises(ConvertError, match="only one primary system partition"):
        S.write_sif(io.BytesIO(), objects=[S.SifObject(S.DATA_PARTITION, data=b"a")] * 2)
    with pytest.raises(ConvertError, match="at most 31 fit"):
        S.write_sif(io.BytesIO(), objects=[], launch_script=b"#" * 32)
    with pytest.raises(ConvertError, match="longer than 128 bytes"):
        S.write_sif(io.BytesIO(), objects=[S.SifObject(S.DATA_GENERIC, data=b"", name="n" * 129)])
    with pytest.raises(ConvertError, match="unknown architecture 'x86'"):
        S.write_sif(io.BytesIO(), objects=[S.SifObject(S.DATA_PARTITION, data=b"", arch="x86")])
    with pytest.raises(ConvertError, match="exactly one of data or path"):
        S.write_sif(io.BytesIO(), objects=[S.SifObject(S.DATA_GENERIC)])


def test_deterministic_with_source_date_epoch() -> None:
    assert S.deterministic(1700000000) == S.deterministic(0) == (-62135596800, bytes(16))
    created, image_id = S.deterministic(None)
    assert created > 1_700_000_000 and len(image_id) == 16 and image_id != bytes(16)
    assert image_id[6] >> 4 == 4  # a version-4 UUID
    assert S.deterministic(None)[1] != image_id


def test_apptainer_sif_layout_and_determinism(tmp_path: Path) -> None:
    squash = tmp_path / "root.sqsh"
    squash.write_bytes(b"hsqs" + bytes(4092) + b"tail")
    outs = [tmp_path / "a.sif", tmp_path / "b.sif"]
    for out in outs:
        S.write_apptainer_sif(out, deffile=b"bootstrap: docker\nfrom: x\n\n", oci_config=b'{"Cmd":["sh"]}',
                              squashfs=squash, arch="amd64", source_date_epoch=0)
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.sif", "b.sif", "root.sqsh"]
    sif = S.read_sif(outs[0])
    assert [(d.datatype_name, d.name) for d in sif.descriptors] == [
        ("Def.FILE", ""), ("JSON.Generic", "oci-config.json"), ("FS", "")]
    assert sif.launch_script == b"#!/usr/bin/env run-singularity\n"
    assert (sif.created, sif.id, sif.arch) == (S.GO_ZERO_TIME, bytes(16), "amd64")
    part = sif.primary_partition()
    assert part is not None and part.offset % 4096 == 0
    copy = io.BytesIO()
    sif.copy_object(part, copy)
    assert copy.getvalue() == squash.read_bytes()
    assert outs[0].stat().st_mode & 0o111


def test_apptainer_sif_objects_in_apptainers_order(tmp_path: Path) -> None:
    squash = tmp_path / "root.sqsh"
    squash.write_bytes(b"hsqs")
    out = tmp_path / "a.sif"
    S.write_apptainer_sif(out, deffile=b"d", oci_config=b"{}", squashfs=squash, arch="ppc64le")
    sif = S.read_sif(out)
    assert [d.name for d in sif.descriptors] == ["", "oci-config.json", ""]
    assert sif.created != S.GO_ZERO_TIME or not any(sif.id)


def test_apptainer_sif_failure_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out.sif"
    squash = tmp_path / "root.sqsh"
    squash.write_bytes(b"hsqs" + bytes(100))
    with pytest.raises(ConvertError, match="unknown architecture 'vax'"):
        S.write_apptainer_sif(out, deffile=b"d", oci_config=b"{}", squashfs=squash, arch="vax")
    with pytest.raises(FileNotFoundError):
        S.write_apptainer_sif(out, deffile=b"d", oci_config=b"{}", squashfs=tmp_path / "nope", arch="amd64")
    (tmp_path / "tar").write_bytes(b"ustar" + bytes(100))
    with pytest.raises(ConvertError, match="tar: not a squashfs file"):
        S.write_apptainer_sif(out, deffile=b"d", oci_config=b"{}", squashfs=tmp_path / "tar", arch="amd64")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root.sqsh", "tar"]


def test_interrupted_write_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    squash = tmp_path / "root.sqsh"
    squash.write_bytes(b"hsqs" + bytes(3 * S.CHUNK))
    out = tmp_path / "out.sif"
    out.write_bytes(b"previous version")
    def interrupted(path: Path, out: object) -> None:
        out.write(path.read_bytes()[:S.CHUNK])  # type: ignore[attr-defined]
        raise KeyboardInterrupt  # part of the squashfs copied into the SIF

    monkeypatch.setattr(S, "copy_into", interrupted)
    with pytest.raises(KeyboardInterrupt):
        S.write_apptainer_sif(out, deffile=b"d", oci_config=b"{}", squashfs=squash, arch="amd64")
    assert out.read_bytes() == b"previous version"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.sif", "root.sqsh"]
