"""SIF v01 (Singularity Image Format): the constants and binary structures of the format (sylabs/sif v2)."""

from __future__ import annotations

import struct

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
