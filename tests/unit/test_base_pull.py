"""A build whose base the engine cannot fetch (offline, a firewall, a TLS-inspecting proxy): the hint names the
base's registry parameter with the line's own flags, ready to paste (fake engines replaying what podman and
Docker stream)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from buildkit.cli import main
from buildkit.engine.base import BuildFailed, BuildRequest, BuiltImage
from buildkit.engine.docker import follow_build_stream
from buildkit.engine.select import Selection
from buildkit.errors import BuildError
from buildkit.orchestration import build as builder

# podman 4.3's Docker-compatible service with no route to Docker Hub (recorded from a real run)
PODMAN_OFFLINE = [
    {"stream": "STEP 1/7: FROM docker.io/library/debian:bookworm\n"},
    {"stream": "Trying to pull docker.io/library/debian:bookworm...\n"},
    {"error": 'creating build container: initializing source docker://debian:bookworm: pinging container registry '
              'registry-1.docker.io: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io '
              'on 10.255.255.53:53: no such host\n'},
]
# Docker's classic builder behind a proxy that re-signs TLS
DOCKER_X509 = [
    {"stream": "Step 1/7 : FROM nvcr.io/nvidia/pytorch:24.06-py3\n"},
    {"errorDetail": {"message": 'Get "https://nvcr.io/v2/": tls: failed to verify certificate: x509: certificate '
                                "signed by unknown authority"}},
]
# a step after FROM that cannot reach its server: not the base's fault
PIP_REFUSED = [
    {"stream": "STEP 1/3: FROM docker.io/library/debian:bookworm\n"},
    {"stream": "STEP 2/3: RUN python3 -m pip install tabulate\n"},
    {"error": "building at STEP \"RUN python3 -m pip install tabulate\": connection refused: exit status 1\n"},
]


PIP_TLS = [
    {"stream": "STEP 1/3: FROM docker.io/library/debian:bookworm\n"},
    {"stream": "STEP 2/3: RUN python3 -m pip install tabulate\n"},
    {"stream": "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after "
               "connection broken by 'SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] "
               "certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))': "
               "/simple/tabulate/\n"},
    {"stream": "ERROR: No matching distribution found for tabulate\n"},
    {"error": "building at STEP \"RUN python3 -m pip install tabulate\": exit status 1\n"},
]


class ReplayingEngine:
    """An engine that streams ``items`` as the docker engine reads them, or raises ``error`` (a refused build)."""

    name, context_format, product = "docker", "docker", "image"
    keeps_layers, image_daemon = True, None

    def __init__(self, items: Sequence[Mapping[str, Any]] = (), error: BuildError | None = None) -> None:
        self.items, self.error = items, error

    def probe(self) -> Any:
        return None

    def cached(self, request: BuildRequest) -> BuiltImage | None:
        return None

    def build(self, request: BuildRequest, listener: Any) -> BuiltImage:
        if self.error is not None:
            raise self.error
        follow_build_stream(self.items, listener)
        raise AssertionError("the replay ends in an error")


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ReplayingEngine]]:
    chosen: list[ReplayingEngine] = []
    monkeypatch.setattr(builder, "select_engine",
                        lambda name, products=(): Selection(chosen[0], "docker (a replay)"))  # type: ignore[arg-type]
    yield chosen


def failure(stack: str, engine: ReplayingEngine, **kwargs: Any) -> BuildError:
    prepared = builder.prepare(stack, **kwargs)
    with pytest.raises(BuildError) as err:
        builder.execute(prepared.plan, engine, prepared.context)  # type: ignore[arg-type]
    return err.value


def commands(hint: str | None) -> list[str]:
    """The commands quoted in ``hint`` (between backticks)."""
    return (hint or "").split("`")[1::2]


def test_offline_the_hint_names_the_registry_parameter_with_the_lines_sets(engine: list[ReplayingEngine]) -> None:
    engine.append(ReplayingEngine(PODMAN_OFFLINE))
    err = failure("hello", engine[0], sets=["debian.release=bookworm", "debian.registry=docker.io/library"])
    assert isinstance(err, BuildFailed) and err.step == "step 1/7 (FROM docker.io/library/debian:bookworm)"
    assert err.cause.startswith("the engine could not fetch the base image: creating build container")
    # the user's own --set kept, the registry's replaced (not given twice)
    assert commands(err.advice) == [
        "ckit build hello --set debian.release=bookworm --set debian.registry=MIRROR/library",
        "ckit build hello --set debian.release=bookworm --set debian.registry=localhost"]
    assert "localhost/debian:bookworm" in (err.advice or "")
    assert "docs/building.md#offline-or-behind-a-proxy" in (err.advice or "")
    assert "certs.d" not in (err.advice or "")


def test_an_untrusted_certificate_says_where_the_engines_ca_goes(engine: list[ReplayingEngine]) -> None:
    engine.append(ReplayingEngine(DOCKER_X509))
    err = failure("pytorch-ddp", engine[0], ngc="24.06")
    # the NGC bases name their registry in the image: the engine gets the image under that name
    assert commands(err.hint) == [
        "docker pull MIRROR/nvidia/pytorch:24.06-py3 && docker tag MIRROR/nvidia/pytorch:24.06-py3 "
        "nvcr.io/nvidia/pytorch:24.06-py3", "ckit build pytorch-ddp --ngc 24.06"]
    assert "/etc/docker/certs.d/nvcr.io/ca.crt" in (err.hint or "")
    assert "/etc/containers/certs.d/nvcr.io/ca.crt" in (err.hint or "")
    assert "update-ca-certificates" in (err.hint or "")


def test_a_refused_build_that_names_the_base_gets_the_hint_too(engine: list[ReplayingEngine]) -> None:
    engine.append(ReplayingEngine(error=BuildError(
        "the engine refused the build of t: pull access denied for debian, repository does not exist or may "
        "require 'docker login': toomanyrequests")))
    err = failure("hello", engine[0])
    assert err.message.startswith("the engine could not fetch the base image: the engine refused")
    assert "ckit build hello --set debian.registry=MIRROR/library" in commands(err.hint)
    assert "docker login docker.io" in commands(err.hint)


def test_a_later_step_that_cannot_connect_keeps_its_own_error(engine: list[ReplayingEngine]) -> None:
    engine.append(ReplayingEngine(PIP_REFUSED))
    err = failure("hello", engine[0])
    assert isinstance(err, BuildFailed) and err.advice is None
    assert err.cause.startswith("building at STEP") and "registry" not in str(err)


def test_on_the_command_line_the_hint_repeats_the_folders(engine: list[ReplayingEngine], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    engine.append(ReplayingEngine(PODMAN_OFFLINE))
    folder = tmp_path / "my recipes"
    folder.mkdir()
    assert main(["build", "hello", "-q", "--recipes", str(folder), "--set", "files.dest=/opt/x"]) == 1
    err = capsys.readouterr().err
    pasted = commands(err.split("hint:", 1)[1])[0]
    assert shlex.split(pasted) == ["ckit", "--recipes", str(folder), "build", "hello", "--set", "files.dest=/opt/x",
                                   "--set", "debian.registry=MIRROR/library"]
    assert "Traceback" not in err


def test_the_hint_repeats_every_option_of_the_line(engine: list[ReplayingEngine], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    engine.append(ReplayingEngine(PODMAN_OFFLINE))
    assert main(["build", "hello", "-q", "--to", "image,sqsh", "-o", str(tmp_path / "images"), "--tag", "me/app:1",
                 "--site", "oci"]) == 1
    err = capsys.readouterr().err
    for pasted in commands(err.split("hint:", 1)[1]):
        assert shlex.split(pasted)[-8:] == ["--to", "image,sqsh", "-o", str(tmp_path / "images"), "--tag", "me/app:1",
                                           "--site", "oci"], pasted


def test_pip_behind_a_tls_proxy_is_told_about_pip_cert(engine: list[ReplayingEngine]) -> None:
    engine.append(ReplayingEngine(PIP_TLS))
    err = failure("hello", engine[0], sets=["debian.release=bookworm"])
    assert isinstance(err, BuildFailed) and err.step and "pip install" in err.step
    assert commands(err.advice) == [
        "ckit build hello --set debian.release=bookworm --set pip.cert=CA.pem",
        "ckit build hello --set debian.release=bookworm --set pip.index_url=https://MIRROR/simple"]


def test_the_page_the_hint_names_has_that_section() -> None:
    from buildkit.orchestration.basepull import DOCS
    from tests import doctext

    page, anchor = DOCS.split("#")
    assert anchor == "offline-or-behind-a-proxy"
    assert "\n## Offline or behind a proxy\n" in (doctext.ROOT / page).read_text()
