"""SIF v01 (Singularity Image Format) reader and writer, pure Python (the layout the sylabs/sif v2 library writes).

The writer lays objects out exactly like the reference library (sylabs/apptainer ``sif`` v2): 128-byte header,
zero gap up to 4096, 48 descriptors of 585 bytes, data from offset 32176; partitions aligned to 4096 bytes,
all other objects unaligned. Large objects (the squashfs) are streamed from a file in chunks.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
import uuid as uuidlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import ConvertError
from ..fsutil import atomic_path, copy_into

# --- constants (sylabs/sif sif.go, descriptor.go) -------------------------------------------------------------------------------
MAGIC = b"SIF_MAGIC\x00"
VERSION = b"01\x00"
HEADER_SIZE = 128
DESCRIPTOR_SIZE = 585
DESCRIPTORS_OFFSET = 4096
DESCRIPTOR_CAPACITY = 48
DATA_OFFSET = DESCRIPTORS_OFFSET + DESCRIPTOR_CAPACITY * DESCRIPTOR_SIZE  # 32176
PARTITION_ALIGNMENT = 4096
GO_ZERO_TIME = -62135596800  # Go's time.Time{}.Unix(): what OptCreateDeterministic stores
APPTAINER_LAUNCH_SCRIPT = b"#!/usr/bin/env run-singularity\n"
GROUP_MASK = 0xF0000000
CHUNK = 1 << 20

DATA_DEFFILE = 0x4001
DATA_ENVVAR = 0x4002
DATA_LABELS = 0x4003
DATA_PARTITION = 0x4004
DATA_SIGNATURE = 0x4005
DATA_GENERIC_JSON = 0x4006
DATA_GENERIC = 0x4007
DATA_CRYPTO_MESSAGE = 0x4008
DATA_SBOM = 0x4009
DATA_OCI_ROOT_INDEX = 0x400A
DATA_OCI_BLOB = 0x400B

DATATYPE_NAMES = {
    DATA_DEFFILE: "Def.FILE", DATA_ENVVAR: "Env.Vars", DATA_LABELS: "JSON.Labels", DATA_PARTITION: "FS",
    DATA_SIGNATURE: "Signature", DATA_GENERIC_JSON: "JSON.Generic", DATA_GENERIC: "Generic/Raw",
    DATA_CRYPTO_MESSAGE: "Cryptographic Message", DATA_SBOM: "SBOM", DATA_OCI_ROOT_INDEX: "OCI.RootIndex",
    DATA_OCI_BLOB: "OCI.Blob",
}
FS_SQUASHFS, FS_EXT3, FS_IMMUOBJECTS, FS_RAW, FS_ENCRYPTED_SQUASHFS, FS_GOCRYPTFS_SQUASHFS = 1, 2, 3, 4, 5, 6
FSTYPE_NAMES = {1: "Squashfs", 2: "Ext3", 3: "Archive", 4: "Raw", 5: "Encrypted squashfs", 6: "Gocryptfs squashfs"}
PART_SYSTEM, PART_PRIMSYS, PART_DATA, PART_OVERLAY = 1, 2, 3, 4
PARTTYPE_NAMES = {1: "System", 2: "*System", 3: "Data", 4: "Overlay"}
HASHTYPE_NAMES = {1: "SHA-256", 2: "SHA-384", 3: "SHA-512", 4: "BLAKE2s-256", 5: "BLAKE2b-256"}
FORMATTYPE_NAMES = {1: "OpenPGP", 2: "PEM"}
MESSAGETYPE_NAMES = {0x100: "Clear Signature", 0x200: "RSA-OAEP"}
SBOM_FORMAT_NAMES = {1: "cyclonedx-json", 2: "cyclonedx-xml", 3: "github-json", 4: "spdx-json", 5: "spdx-rdf",
                     6: "spdx-tag-value", 7: "spdx-yaml", 8: "syft-json"}
ARCH_CODES = {"unknown": "00", "386": "01", "amd64": "02", "arm": "03", "arm64": "04", "ppc64": "05",
              "ppc64le": "06", "mips": "07", "mipsle": "08", "mips64": "09", "mips64le": "10", "s390x": "11",
              "riscv64": "12", "loong64": "13"}
ARCH_NAMES = {code: name for name, code in ARCH_CODES.items()}

_HEADER = struct.Struct("<32s10s3s3s16sqqqqqqqq")
_DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")
_PARTITION = struct.Struct("<ii3s")
_SIGNATURE = struct.Struct("<i256s")
_CRYPTO = struct.Struct("<ii")
_SBOM = struct.Struct("<i")
assert _HEADER.size == HEADER_SIZE and _DESCRIPTOR.size == DESCRIPTOR_SIZE


def link_group(group: int) -> int:
    """The ``linked`` value of an object linked to a whole group (``OptLinkedGroupID``)."""
    return group | GROUP_MASK


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

    def size(self) -> int:
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
    layout: list[tuple[int, int, SifObject]] = []  # (padding before, size, object)
    end = DATA_OFFSET
    for index, obj in enumerate(objects):
        name = obj.name.encode()
        if len(name) > 128:
            raise ConvertError(f"SIF object name {obj.name!r} is longer than 128 bytes")
        size = obj.size()
        align = obj.alignment if obj.alignment is not None else (
            PARTITION_ALIGNMENT if obj.datatype == DATA_PARTITION else 0)
        offset = -(-end // align) * align if align > 1 else end
        digest = _sha256(obj) if obj.datatype in (DATA_OCI_ROOT_INDEX, DATA_OCI_BLOB) else None
        extra = _extra(obj, digest)
        if len(extra) > 384:
            raise ConvertError(f"SIF object {obj.name!r}: type metadata longer than 384 bytes")
        if obj.datatype == DATA_PARTITION and obj.parttype == PART_PRIMSYS:
            header_arch = obj.arch
        descriptors.append(_DESCRIPTOR.pack(
            obj.datatype, True, index + 1, obj.group | GROUP_MASK, obj.linked, offset, size,
            offset - end + size, created, created, 0, 0, name, extra))
        layout.append((offset - end, size, obj))
        end = offset + size

    out.write(_HEADER.pack(
        launch_script, MAGIC, VERSION, ARCH_CODES[header_arch].encode() + b"\0", image_id, created, created,
        DESCRIPTOR_CAPACITY - len(objects), DESCRIPTOR_CAPACITY, DESCRIPTORS_OFFSET,
        DESCRIPTOR_CAPACITY * DESCRIPTOR_SIZE, DATA_OFFSET, end - DATA_OFFSET))
    out.write(bytes(DESCRIPTORS_OFFSET - HEADER_SIZE))
    out.write(b"".join(descriptors))
    out.write(bytes((DESCRIPTOR_CAPACITY - len(objects)) * DESCRIPTOR_SIZE))
    for padding, size, obj in layout:
        out.write(bytes(padding))
        written = copy_into(obj.path, out) if obj.path is not None else None  # in the kernel, where possible
        for block in obj.chunks() if written is None else ():
            out.write(block)
            written = (written or 0) + len(block)
        if written != size:
            raise ConvertError(f"{obj.path} changed size while it was written into the SIF ({size} → {written} bytes)")


def write_apptainer_sif(
    out_path: Path,
    *,
    deffile: bytes,
    oci_config: bytes,
    squashfs: Path,
    arch: str,
    inspect_metadata: bytes | None = None,
    source_date_epoch: int | None = None,
) -> None:
    """Write a SIF as ``apptainer build`` does, atomically: temp file, fsync, verify, rename.

    Objects: Def.FILE, the JSON.Generic objects sorted by name (``inspect-metadata.json`` when given,
    ``oci-config.json``), then the squashfs as the primary system partition. ``source_date_epoch`` makes
    the output deterministic (nil UUID, Go zero time), as apptainer does.
    """
    out_path = Path(out_path)
    with open(squashfs, "rb") as head:
        if head.read(4) != b"hsqs":
            raise ConvertError(f"{squashfs}: not a squashfs file, so it cannot be a SIF's system partition")
    objects = [SifObject(DATA_DEFFILE, data=deffile)]
    if inspect_metadata is not None:
        objects.append(SifObject(DATA_GENERIC_JSON, data=inspect_metadata, name="inspect-metadata.json"))
    objects.append(SifObject(DATA_GENERIC_JSON, data=oci_config, name="oci-config.json"))
    objects.append(SifObject(DATA_PARTITION, path=Path(squashfs), fstype=FS_SQUASHFS, parttype=PART_PRIMSYS,
                             arch=arch))
    created, image_id = deterministic(source_date_epoch)

    def holds_partition(tmp: Path) -> None:
        partition = read_sif(tmp).primary_partition()
        if partition is None or partition.size != Path(squashfs).stat().st_size:
            raise ConvertError(f"{out_path}: the written SIF does not hold the squashfs partition")

    os.umask(umask := os.umask(0))  # read the umask: set, then restore it
    with atomic_path(out_path, mode=0o755 & ~umask, suffix=".tmp", verify=holds_partition) as tmp, \
            open(tmp, "wb") as out:
        write_sif(out, objects=objects, launch_script=APPTAINER_LAUNCH_SCRIPT, created=created, uuid=image_id)


# --- reader --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SifDescriptor:
    """One used descriptor, every field decoded."""

    datatype: int
    id: int
    group_raw: int
    linked_raw: int
    offset: int
    size: int
    size_with_padding: int
    created: int
    modified: int
    uid: int
    gid: int
    name: str
    extra: bytes = field(repr=False)

    @property
    def datatype_name(self) -> str:
        return DATATYPE_NAMES.get(self.datatype, f"Unknown data-type {self.datatype:#x}")

    @property
    def group(self) -> int:
        """Group ID, 0 for "no group"."""
        return self.group_raw & ~GROUP_MASK

    @property
    def linked_id(self) -> int:
        return self.linked_raw & ~GROUP_MASK

    @property
    def linked_to_group(self) -> bool:
        return bool(self.linked_raw & GROUP_MASK)

    def _int(self, fmt: struct.Struct, index: int) -> int | None:
        return fmt.unpack_from(self.extra)[index]

    @property
    def fstype(self) -> int | None:
        return self._int(_PARTITION, 0) if self.datatype == DATA_PARTITION else None

    @property
    def parttype(self) -> int | None:
        return self._int(_PARTITION, 1) if self.datatype == DATA_PARTITION else None

    @property
    def arch(self) -> str | None:
        if self.datatype != DATA_PARTITION:
            return None
        code = _PARTITION.unpack_from(self.extra)[2].rstrip(b"\0").decode(errors="replace")
        return ARCH_NAMES.get(code, "unknown")

    @property
    def hashtype(self) -> int | None:
        return self._int(_SIGNATURE, 0) if self.datatype == DATA_SIGNATURE else None

    @property
    def entity(self) -> str | None:
        """Signer fingerprint (upper-case hex of Entity[0:20]) for signatures."""
        if self.datatype != DATA_SIGNATURE:
            return None
        return _SIGNATURE.unpack_from(self.extra)[1][:20].hex().upper()

    @property
    def formattype(self) -> int | None:
        return self._int(_CRYPTO, 0) if self.datatype == DATA_CRYPTO_MESSAGE else None

    @property
    def messagetype(self) -> int | None:
        return self._int(_CRYPTO, 1) if self.datatype == DATA_CRYPTO_MESSAGE else None

    @property
    def sbom_format(self) -> int | None:
        return self._int(_SBOM, 0) if self.datatype == DATA_SBOM else None

    @property
    def digest(self) -> str | None:
        if self.datatype not in (DATA_OCI_ROOT_INDEX, DATA_OCI_BLOB):
            return None
        return self.extra.rstrip(b"\0").decode(errors="replace")


@dataclass(frozen=True)
class SifFile:
    """The global header plus the used descriptors of a SIF file."""

    path: Path
    launch_script: bytes
    version: str
    arch_code: str
    id: bytes
    created: int
    modified: int
    descriptors_free: int
    descriptors_total: int
    descriptors_offset: int
    descriptors_size: int
    data_offset: int
    data_size: int
    descriptors: tuple[SifDescriptor, ...]

    @property
    def arch(self) -> str:
        return ARCH_NAMES.get(self.arch_code, "unknown")

    @property
    def uuid(self) -> str:
        return str(uuidlib.UUID(bytes=self.id))

    def primary_partition(self) -> SifDescriptor | None:
        return next((d for d in self.descriptors if d.datatype == DATA_PARTITION and d.parttype == PART_PRIMSYS),
                    None)

    def descriptor(self, object_id: int) -> SifDescriptor:
        for d in self.descriptors:
            if d.id == object_id:
                return d
        raise ConvertError(f"{self.path}: no SIF object with ID {object_id}")

    def read_object(self, desc: SifDescriptor, limit: int | None = None) -> bytes:
        """The data of a (small) object; ``limit`` caps the bytes read."""
        with open(self.path, "rb") as src:
            src.seek(desc.offset)
            return src.read(desc.size if limit is None else min(limit, desc.size))

    def copy_object(self, desc: SifDescriptor, out: BinaryIO) -> None:
        """Stream an object's data into ``out``."""
        with open(self.path, "rb") as src:
            src.seek(desc.offset)
            remaining = desc.size
            while remaining:
                block = src.read(min(CHUNK, remaining))
                if not block:
                    raise ConvertError(f"{self.path}: object {desc.id} runs past the end of the file")
                out.write(block)
                remaining -= len(block)


def is_sif(head: bytes) -> bool:
    """Whether a file's first bytes carry the SIF magic (apptainer's detection: in the first 2048 bytes)."""
    return b"SIF_MAGIC" in head[:2048]


def read_sif(path: Path | str) -> SifFile:
    """Read and decode the header and descriptors of ``path``; ConvertError names the file on bad input."""
    path = Path(path)
    try:
        with open(path, "rb") as src:
            raw = src.read(HEADER_SIZE)
            if len(raw) < HEADER_SIZE:
                raise ConvertError(f"{path}: not a SIF file (only {len(raw)} bytes)")
            (launch, magic, version, arch, image_id, created, modified, free, total, doff, dsize, data_offset,
             data_size) = _HEADER.unpack(raw)
            if magic != MAGIC:
                raise ConvertError(f"{path}: not a SIF file (bad magic {magic!r})",
                                   hint="give a .sif written by apptainer, singularity or ckit")
            if version != VERSION:
                shown = version.rstrip(b"\0").decode(errors="replace")
                raise ConvertError(f"{path}: unsupported SIF version {shown!r}",
                                   hint="ckit reads SIF version 01")
            if not 0 <= total <= 65536 or doff < HEADER_SIZE:
                raise ConvertError(f"{path}: corrupt SIF header ({total} descriptors at offset {doff})")
            src.seek(doff)
            table = src.read(total * DESCRIPTOR_SIZE)
            if len(table) != total * DESCRIPTOR_SIZE:
                raise ConvertError(f"{path}: SIF descriptor table is truncated")
    except OSError as err:
        raise ConvertError(f"{path}: cannot read: {err.strerror or err}") from err
    descriptors = []
    for (datatype, used, obj_id, group, linked, offset, size, padded, ctime, mtime, uid, gid, name,
         extra) in _DESCRIPTOR.iter_unpack(table):
        if used:
            descriptors.append(SifDescriptor(datatype, obj_id, group, linked, offset, size, padded, ctime, mtime,
                                             uid, gid, name.rstrip(b"\0").decode(errors="replace"), extra))
    return SifFile(path, launch.rstrip(b"\0"), version.rstrip(b"\0").decode(), arch.rstrip(b"\0").decode(errors="replace"),
                   image_id, created, modified, free, total, doff, dsize, data_offset, data_size, tuple(descriptors))

