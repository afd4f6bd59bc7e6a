from __future__ import annotations

import pytest

from buildkit.errors import ConfigError
from buildkit.registry.distribution.reference import Reference, is_loopback, parse, parse_registry

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:5000/team/app:v1", Reference("127.0.0.1:5000", "team/app", "v1")),
    ("localhost/app", Reference("localhost", "app")),
    ("ubuntu", Reference("docker.io", "library/ubuntu")),
    ("ubuntu:22.04", Reference("docker.io", "library/ubuntu", "22.04")),
    ("nvidia/cuda:12.4.1-runtime", Reference("docker.io", "nvidia/cuda", "12.4.1-runtime")),
    ("index.docker.io/library/busybox:1", Reference("docker.io", "library/busybox", "1")),
    ("nvcr.io/nvidia/pytorch:24.06-py3", Reference("nvcr.io", "nvidia/pytorch", "24.06-py3")),
    (f"ghcr.io/a/b@{DIGEST}", Reference("ghcr.io", "a/b", None, DIGEST)),
    (f"ghcr.io/a/b:t@{DIGEST}", Reference("ghcr.io", "a/b", "t", DIGEST)),
    ("docker://reg.example.org:443/x/y:z", Reference("reg.example.org:443", "x/y", "z")),
    ("oras://127.0.0.1:5000/sif/app:1", Reference("127.0.0.1:5000", "sif/app", "1")),
])
def test_parse(text: str, expected: Reference) -> None:
    assert parse(text) == expected


def test_reference_text_and_manifest_reference() -> None:
    assert str(parse("ubuntu")) == "docker.io/library/ubuntu:latest"
    assert parse("ubuntu").reference == "latest"
    assert parse("ubuntu").api_host == "registry-1.docker.io"
    pinned = parse(f"r.io/a:t@{DIGEST}")
    assert pinned.reference == DIGEST
    assert str(pinned) == f"r.io/a:t@{DIGEST}"
    assert str(parse("r.io/a:t").with_digest(DIGEST)) == f"r.io/a:t@{DIGEST}"


@pytest.mark.parametrize(("text", "message"), [
    ("Team/App:v1", "invalid repository name 'Team/App'"),
    ("r.io/app:bad tag", "invalid image reference"),
    ("r.io/app@sha256:123", "invalid digest"),
    ("r.io/app:-x", "invalid tag '-x'"),
    ("", "invalid image reference"),
])
def test_parse_rejects_bad_references(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(text)
    assert message in str(err.value)
    assert err.value.exit_code == 2


def test_registry_hosts() -> None:
    assert parse_registry("https://reg.example.org:5000/v2/") == "reg.example.org:5000"
    assert parse_registry("index.docker.io") == "docker.io"
    assert is_loopback("127.0.0.1:5000") and is_loopback("localhost") and is_loopback("[::1]:5000")
    assert not is_loopback("reg.example.org:5000")
    with pytest.raises(ConfigError):
        parse_registry("bad host!")
