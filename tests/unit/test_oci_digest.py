"""The one digest grammar: strict parsing, every registered algorithm verified, nothing else accepted."""

from __future__ import annotations

import hashlib
import io

import pytest

from buildkit.errors import IntegrityError
from buildkit.oci.digest import VerifyingReader, is_valid, parse_digest, verify_bytes
from buildkit.oci.layout import descriptor

DATA = b"ckit " * 999


@pytest.mark.parametrize("text", [
    "sha256:" + "a" * 64,
    "sha512:" + "0" * 128,
    "blake3:" + "f" * 64,
])
def test_registered_algorithms_parse(text: str) -> None:
    assert str(parse_digest(text)) == text


@pytest.mark.parametrize("text", [
    "sha256:../../../etc/hostname",  # a path, not a digest: never becomes a file name or URL
    "sha256:" + "A" * 64,  # upper case is not the registered encoding
    "sha256:" + "a" * 63,
    "sha512:" + "a" * 64,
    "md5:" + "a" * 32,  # not registered
    "sha256",
    "",
    "sha256:" + "a" * 64 + "\n",  # `$` would match before a trailing newline; fullmatch does not
    None,
    123,
])
def test_anything_else_is_an_integrity_error(text: object) -> None:
    with pytest.raises(IntegrityError) as err:
        parse_digest(text, "blob x")
    assert err.value.exit_code == 4 and "blob x" in str(err.value)
    assert not is_valid(text)


@pytest.mark.parametrize("algorithm", ["sha256", "sha512"])
def test_verification_uses_the_digest_algorithm(algorithm: str) -> None:
    digest = f"{algorithm}:{hashlib.new(algorithm, DATA).hexdigest()}"
    verify_bytes(DATA, digest, "blob")
    reader = VerifyingReader(io.BytesIO(DATA), digest, len(DATA), "blob")
    assert b"".join(iter(lambda: reader.read(1000), b"")) == DATA and reader.verified
    with pytest.raises(IntegrityError, match="does not match its digest"):
        verify_bytes(DATA[:-1] + b"!", digest, "blob")
    tampered = VerifyingReader(io.BytesIO(DATA[:-1] + b"!"), digest, len(DATA), "blob")
    with pytest.raises(IntegrityError, match=f"got {algorithm}:"):
        tampered.drain()


@pytest.mark.parametrize("desc, message", [
    ([], "must be a JSON object"),
    ({"digest": "sha256:" + "a" * 64, "size": "12"}, "size must be a non-negative integer"),
    ({"digest": "sha256:" + "a" * 64, "size": -1}, "size must be a non-negative integer"),
    ({"digest": "sha256:" + "a" * 64, "size": True}, "size must be a non-negative integer"),
    ({"digest": "sha256:" + "a" * 64, "size": 1, "mediaType": 7}, "mediaType must be a string"),
    ({"digest": "sha256:" + "a" * 64, "size": 1, "annotations": {"a": 1}}, "annotations must map strings"),
    ({"digest": "sha256:x/../y", "size": 1}, "invalid digest"),
])
def test_descriptors_with_wrong_types_are_clear_errors(desc: object, message: str) -> None:
    with pytest.raises(IntegrityError, match=message):
        descriptor(desc, "manifest layers[0]")
