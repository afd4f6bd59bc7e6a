"""SIF v01 (Singularity Image Format) writer, pure Python (the layout the sylabs/sif v2 library writes); the format's
constants (:mod:`.format`) and the reader (:mod:`.read`) are re-exported here.

The writer lays objects out exactly like the reference library (sylabs/apptainer ``sif`` v2): 128-byte header,
zero gap up to 4096, 48 descriptors of 585 bytes, data from offset 32176; partitions aligned to 4096 bytes,
all other objects unaligned. Large objects (the squashfs) are streamed from a file in chunks.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid as uuidlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ...errors import ConvertError
from ...fs.files import atomic_path, copy_into
from .format import *  # noqa: F403 - the format's names, as callers have always found them here
from .format import (
    _DESCRIPTOR,
    _HEADER,
    _PARTITION,
    APPTAINER_LAUNCH_SCRIPT,
    ARCH_CODES,
    CHUNK,
    DATA_DEFFILE,
    DATA_GENERIC_JSON,
    DATA_OCI_BLOB,
    DATA_OCI_ROOT_INDEX,
    DATA_OFFSET,
    DATA_PARTITION,
    DESCRIPTOR_CAPACITY,
    DESCRIPTOR_SIZE,
    DESCRIPTORS_OFFSET,
    FS_SQUASHFS,
    GO_ZERO_TIME,
    GROUP_MASK,
    HEADER_SIZE,
    MAGIC,
    PART_PRIMSYS,
    PARTITION_ALIGNMENT,
    VERSION,
)
from .read import SifDescriptor as SifDescriptor  # the reader, re-exported
from .read import SifFile as SifFile
from .read import is_sif as is_sif
from .read import read_sif as read_sif


# --- writer --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SifObject:
    """One data object to write. Give ``data`` (small objects) or ``path`` (streamed in chunks).

    ``group`` 0 means "no group". ``linked`` is an object ID, or :func:`link_group` for a group link.
    ``fstype``/``parttype``/``arch`` describe partitions; ``extra`` is the raw type-specific metadata of
    other kinds (signature, crypto message, SBOM). OCI blob/index digests are computed while writing.
    """

    datatype: int
    data: bytes | None = None
    path: Path | None = None
    name: str = ""
    group: int = 1
    linked: int = 0
    fstype: int = FS_SQUASHFS
    parttype: int = PART_PRIMSYS
    arch: str = "unknown"
    extra: bytes = b""
    alignment: int | None = None  # None: 4096 for partitions, unaligned for the rest
    in_place: int | None = None  # the object's size: its bytes are in the file already, where the layout puts it

    def size(self) -> int:
        if self.in_place is not None:
            return self.in_place
        if (self.data is None) == (self.path is None):
            raise ConvertError(f"SIF object {self.name or hex(self.datatype)}: give exactly one of data or path")
        return len(self.data) if self.data is not None else Path(self.path).stat().st_size  # type: ignore[arg-type]

    def chunks(self) -> Iterator[bytes]:
        if self.data is not None:
            yield self.data
            return
        with open(self.path, "rb") as src:  # type: ignore[arg-type]
            while block := src.read(CHUNK):
                yield block


def deterministic(source_date_epoch: int | None) -> tuple[int, bytes]:
    """(created, uuid) as apptainer picks them: SOURCE_DATE_EPOCH set → nil UUID + Go zero time, else random + now."""
    if source_date_epoch is not None:
        return GO_ZERO_TIME, bytes(16)
    return int(time.time()), uuidlib.uuid4().bytes


def _extra(obj: SifObject, digest: str | None) -> bytes:
    if obj.datatype == DATA_PARTITION:
        if obj.arch not in ARCH_CODES:
            raise ConvertError(f"SIF partition {obj.name!r}: unknown architecture {obj.arch!r}",
                               hint=f"use one of: {', '.join(ARCH_CODES)}")
        return _PARTITION.pack(obj.fstype, obj.parttype, ARCH_CODES[obj.arch].encode() + b"\0")
    if digest is not None:
        return digest.encode()
    return obj.extra


def _sha256(obj: SifObject) -> str:
    h = hashlib.sha256()
    for block in obj.chunks():
        h.update(block)
    return "sha256:" + h.hexdigest()


def write_sif(
    out: BinaryIO,
    *,
    objects: Sequence[SifObject],
    launch_script: bytes = APPTAINER_LAUNCH_SCRIPT,
    created: int | None = None,
    uuid: bytes | None = None,
) -> None:
    """Write a whole SIF file sequentially to ``out`` (which need not be seekable)."""
    head, layout = _plan(objects, launch_script, created, uuid)
    out.write(head)
    for _offset, padding, size, obj in layout:
        out.write(bytes(padding))
        written = copy_into(obj.path, out) if obj.path is not None else None  # in the kernel, where possible
        for block in obj.chunks() if written is None else ():
            out.write(block)
            written = (written or 0) + len(block)
        if written != size:
            raise ConvertError(f"{obj.path} changed size while it was written into the SIF ({size} → {written} bytes)")


def _plan(objects: Sequence[SifObject], launch_script: bytes, created: int | None,
          uuid: bytes | None) -> tuple[bytes, list[tuple[int, int, int, SifObject]]]:
    """The header and descriptors, and each object's (offset, padding before, size, object)."""
    if len(launch_script) >= 32:
        raise ConvertError(f"SIF launch script is {len(launch_script)} bytes; at most 31 fit")
    if len(objects) > DESCRIPTOR_CAPACITY:
        raise ConvertError(f"{len(objects)} SIF objects do not fit in {DESCRIPTOR_CAPACITY} descriptors")
    if sum(1 for o in objects if o.datatype == DATA_PARTITION and o.parttype == PART_PRIMSYS) > 1:
        raise ConvertError("a SIF file can hold only one primary system partition")
    created = int(time.time()) if created is None else created
    image_id = uuidlib.uuid4().bytes if uuid is None else uuid
    if len(image_id) != 16:
        raise ConvertError("SIF image ID must be 16 bytes")

    header_arch = "unknown"
    descriptors: list[bytes] = []
    layout: list[tuple[int, int, int, SifObject]] = []
    end = DATA_OFFSET
    for index, obj in enumerate(objects):
        name = obj.name.encode()
        if len(name) > 128:
            raise ConvertError(f"SIF object name {obj.name!r} is longer than 128 bytes")
        size = obj.size()
        offset = _offset(obj, end)
        digest = _sha256(obj) if obj.datatype in (DATA_OCI_ROOT_INDEX, DATA_OCI_BLOB) else None
        extra = _extra(obj, digest)
        if len(extra) > 384:
            raise ConvertError(f"SIF object {obj.name!r}: type metadata longer than 384 bytes")
        if obj.datatype == DATA_PARTITION and obj.parttype == PART_PRIMSYS:
            header_arch = obj.arch
        descriptors.append(_DESCRIPTOR.pack(
            obj.datatype, True, index + 1, obj.group | GROUP_MASK, obj.linked, offset, size,
            offset - end + size, created, created, 0, 0, name, extra))
        layout.append((offset, offset - end, size, obj))
        end = offset + size
    head = b"".join((
        _HEADER.pack(launch_script, MAGIC, VERSION, ARCH_CODES[header_arch].encode() + b"\0", image_id, created,
                     created, DESCRIPTOR_CAPACITY - len(objects), DESCRIPTOR_CAPACITY, DESCRIPTORS_OFFSET,
                     DESCRIPTOR_CAPACITY * DESCRIPTOR_SIZE, DATA_OFFSET, end - DATA_OFFSET),
        bytes(DESCRIPTORS_OFFSET - HEADER_SIZE), *descriptors,
        bytes((DESCRIPTOR_CAPACITY - len(objects)) * DESCRIPTOR_SIZE)))
    return head, layout


def _offset(obj: SifObject, end: int) -> int:
    """Where ``obj`` starts when the objects before it end at ``end``."""
    align = obj.alignment if obj.alignment is not None else (PARTITION_ALIGNMENT if obj.datatype == DATA_PARTITION else 0)
    return -(-end // align) * align if align > 1 else end


def _apptainer_objects(deffile: bytes, oci_config: bytes, partition: SifObject) -> list[SifObject]:
    """What ``apptainer build`` writes: Def.FILE, the JSON.Generic ``oci-config.json``, then the squashfs."""
    return [SifObject(DATA_DEFFILE, data=deffile), SifObject(DATA_GENERIC_JSON, data=oci_config, name="oci-config.json"),
            partition]


def write_apptainer_sif(
    out_path: Path,
    *,
    deffile: bytes,
    oci_config: bytes,
    squashfs: Path,
    arch: str,
    source_date_epoch: int | None = None,
) -> None:
    """Write a SIF as ``apptainer build`` does, atomically: temp file, fsync, verify, rename.

    Objects: Def.FILE, the JSON.Generic ``oci-config.json``, then the squashfs as the primary system partition. ``source_date_epoch`` makes
    the output deterministic (nil UUID, Go zero time), as apptainer does.
    """
    out_path = Path(out_path)
    with open(squashfs, "rb") as head:
        if head.read(4) != b"hsqs":
            raise ConvertError(f"{squashfs}: not a squashfs file, so it cannot be a SIF's system partition")
    objects = _apptainer_objects(deffile, oci_config, SifObject(
        DATA_PARTITION, path=Path(squashfs), fstype=FS_SQUASHFS, parttype=PART_PRIMSYS, arch=arch))
    created, image_id = deterministic(source_date_epoch)

    def holds_partition(tmp: Path) -> None:
        partition = read_sif(tmp).primary_partition()
        if partition is None or partition.size != Path(squashfs).stat().st_size:
            raise ConvertError(f"{out_path}: the written SIF does not hold the squashfs partition")

    os.umask(umask := os.umask(0))  # read the umask: set, then restore it
    with atomic_path(out_path, mode=0o755 & ~umask, suffix=".tmp", verify=holds_partition) as tmp, \
            open(tmp, "wb") as out:
        write_sif(out, objects=objects, launch_script=APPTAINER_LAUNCH_SCRIPT, created=created, uuid=image_id)


def apptainer_partition_offset(*, deffile: bytes, oci_config: bytes) -> int:
    """Where :func:`finish_apptainer_sif` expects the squashfs: written there first, it is never copied."""
    objects = _apptainer_objects(deffile, oci_config, SifObject(DATA_PARTITION, in_place=0))
    return _offset(objects[-1], DATA_OFFSET + sum(o.size() for o in objects[:-1]))


def finish_apptainer_sif(path: Path, *, deffile: bytes, oci_config: bytes, arch: str, squashfs_size: int,
                         source_date_epoch: int | None = None) -> None:
    """Make ``path``, whose squashfs (``squashfs_size`` bytes) lies at :func:`apptainer_partition_offset`, the SIF
    :func:`write_apptainer_sif` writes: the header, the descriptors and the small objects go before it. ``path``
    is a temp file the caller verifies, fsyncs and publishes."""
    objects = _apptainer_objects(deffile, oci_config, SifObject(
        DATA_PARTITION, fstype=FS_SQUASHFS, parttype=PART_PRIMSYS, arch=arch, in_place=squashfs_size))
    created, image_id = deterministic(source_date_epoch)
    head, layout = _plan(objects, APPTAINER_LAUNCH_SCRIPT, created, image_id)
    if layout[-1][0] != apptainer_partition_offset(deffile=deffile, oci_config=oci_config):
        raise ConvertError(f"{path}: the SIF's partition is not where its squashfs was written")
    with open(path, "r+b") as out:
        out.write(head)
        for offset, padding, _size, obj in layout[:-1]:
            out.write(bytes(padding))
            assert out.tell() == offset and obj.data is not None
            out.write(obj.data)
        out.write(bytes(layout[-1][1]))
        if out.seek(0, os.SEEK_END) != layout[-1][0] + squashfs_size:
            raise ConvertError(f"{path}: the squashfs partition is not {squashfs_size} bytes long")
