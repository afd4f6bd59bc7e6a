"""ckit's SIF text reports match the reference siftool's own goldens (../shared/testdata/sif/sylabs/siftool-expected)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from buildkit.image.sif import text as T
from buildkit.image.sif import write as S
from tests.testdata import sif_dir

SYLABS = sif_dir() / "sylabs"
EXPECTED = SYLABS / "siftool-expected"


def sif_for(golden: Path) -> Path:
    """``OneGroupSignedPGP.golden`` → ``one-group-signed-pgp.sif``."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z][a-z]*", golden.stem)
    return SYLABS / ("-".join(w.lower() for w in words) + ".sif")


@pytest.mark.parametrize("golden", sorted((EXPECTED / "TestApp_Header").iterdir()), ids=lambda p: p.stem)
def test_header_matches_siftool(golden: Path) -> None:
    assert T.format_header(S.read_sif(sif_for(golden))) == golden.read_text()


@pytest.mark.parametrize("golden", sorted((EXPECTED / "TestApp_List").iterdir()), ids=lambda p: p.stem)
def test_list_matches_siftool(golden: Path) -> None:
    assert T.format_list(S.read_sif(sif_for(golden))) == golden.read_text()


@pytest.mark.parametrize(("golden", "sif_name", "object_id"), [
    ("CryptMessage", "one-object-crypt-message.sif", 1),
    ("DataPartitionEXT3", "two-groups.sif", 3),
    ("DataPartitionRaw", "one-group.sif", 1),
    ("DataPartitionSquashFS", "one-group.sif", 2),
    ("DataSignature", "two-groups-signed-pgp.sif", 4),
    ("GenericJSON", "one-object-generic-json.sif", 1),
    ("OCIBlob", "one-object-oci-blob.sif", 1),
    ("OCIRootIndex", "one-object-oci-root-index.sif", 1),
    ("SBOM", "one-object-sbom.sif", 1),
    ("Time", "one-object-time.sif", 1),
])
def test_info_matches_siftool(golden: str, sif_name: str, object_id: int) -> None:
    desc = S.read_sif(SYLABS / sif_name).descriptor(object_id)
    assert T.format_info(desc) == (EXPECTED / "TestApp_Info" / f"{golden}.golden").read_text()


@pytest.mark.parametrize(("size", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (1535, "1 KiB"),
                                            (1536, "2 KiB"), (28080, "27 KiB"), (3 << 30, "3 GiB")])
def test_readable_size(size: int, text: str) -> None:
    assert T.readable_size(size) == text


def test_dump_goldens_are_the_object_bytes() -> None:
    sif = S.read_sif(SYLABS / "one-group.sif")
    assert sif.read_object(sif.descriptor(1)) == (EXPECTED / "TestApp_Dump" / "One.golden").read_bytes()
    assert sif.read_object(sif.descriptor(2)) == (EXPECTED / "TestApp_Dump" / "Two.golden").read_bytes()


def test_json_documents_carry_every_decoded_field() -> None:
    sif = S.read_sif(SYLABS / "two-groups-signed-pgp.sif")
    head = T.header_json(sif)
    assert (head["arch"], head["data_offset"], head["descriptors_free"]) == ("386", 32176, 43)
    sig = T.descriptor_json(sif.descriptor(4))
    assert sig["signature"] == {"hashtype": "SHA-256", "entity": "12045C8C0B1004D058DE4BEDA20C27EE7FF7BA84"}
    assert (sig["group"], sig["linked"], sig["linked_to_group"]) == (None, 1, True)
    part = T.descriptor_json(sif.descriptor(3))
    assert part["partition"] == {"fstype": "Ext3", "parttype": "System", "arch": "amd64"}
    assert part["label"] == "FS (Ext3/System/amd64)"
