"""Engine registry, build-stream parsing, build contexts and the apptainer command line (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildkit.daemon import fallback_sockets, server_name
from buildkit.engine.apptainer import base_registry, build_argv, failing_section, needs_fakeroot, nohttps_flag
from buildkit.engine.base import BuildEvent, BuildFailed, context_digest
from buildkit.engine.docker import STEP_RE, follow_build_stream
from buildkit.engine.select import engine_names, get_engine
from buildkit.errors import ConfigError
from buildkit.render.context import ContextFile

# A failing build as podman 4.3's Docker-compatible service streams it (recorded from a real run).
PODMAN_FAILURE = [
    {"stream": "STEP 1/4: FROM localhost/busybox:1.36\n"},
    {"stream": "STEP 2/4: RUN echo hi\n"},
    {"stream": "hi\n"},
    {"stream": "--> 7c70fa4bd77\n"},
    {"stream": "STEP 3/4: RUN echo bad >&2; false\n"},
    {"stream": "bad\n"},
    {"errorDetail": {"message": 'building at STEP "RUN echo bad >&2; false": while running runtime: exit status 1\n'},
     "error": 'building at STEP "RUN echo bad >&2; false": while running runtime: exit status 1\n'},
]
PODMAN_SUCCESS = [
    {"stream": "STEP 1/2: FROM localhost/busybox:1.36\n"},
    {"stream": "STEP 2/2: RUN echo hello\n"},
    {"stream": "hello\n"},
    {"stream": "COMMIT localhost/exp:1\n"},
    {"aux": {"ID": "sha256:83c10d536380d5a1f171657596e876c772fde351527aca00132dbc654db9bc9f"}},
    {"stream": "Successfully tagged localhost/exp:1\n"},
]


def test_engines_are_registered_by_name() -> None:
    assert engine_names() == ["apptainer", "docker"]
    assert get_engine("docker").product == "image"
    assert get_engine("apptainer").context_format == "singularity"


def test_unknown_engine_is_bad_input_with_the_choices() -> None:
    with pytest.raises(ConfigError) as err:
        get_engine("buildah")
    assert err.value.exit_code == 2
    assert err.value.hint == "choose one of: auto, apptainer, docker"


@pytest.mark.parametrize(("line", "expected"), [
    ("STEP 3/4: RUN echo bad >&2; false", ("3", "4", "RUN echo bad >&2; false")),
    ("Step 2/5 : RUN apt-get update", ("2", "5", "RUN apt-get update")),
])
def test_step_lines_of_podman_and_docker(line: str, expected: tuple[str, str, str]) -> None:
    match = STEP_RE.match(line)
    assert match is not None and match.groups() == expected


def test_stream_success_forwards_lines_and_steps() -> None:
    events: list[BuildEvent] = []
    result = follow_build_stream(PODMAN_SUCCESS, events.append)
    assert result.image_id == "sha256:83c10d536380d5a1f171657596e876c772fde351527aca00132dbc654db9bc9f"
    assert [(e.step, e.steps) for e in events if e.step] == [(1, 2), (2, 2)]
    assert result.log == ["STEP 1/2: FROM localhost/busybox:1.36", "STEP 2/2: RUN echo hello", "hello",
                          "COMMIT localhost/exp:1", "Successfully tagged localhost/exp:1"]


def test_error_item_is_a_failure_naming_the_step_with_the_log_tail() -> None:
    with pytest.raises(BuildFailed) as err:
        follow_build_stream(PODMAN_FAILURE, lambda event: None)
    assert err.value.step == "step 3/4 (RUN echo bad >&2; false)"
    assert err.value.exit_code == 1
    text = str(err.value)
    assert text.startswith('build failed at step 3/4 (RUN echo bad >&2; false): building at STEP "RUN echo bad')
    assert "--- last 7 lines of the build log ---\nSTEP 1/4: FROM localhost/busybox:1.36\n" in text
    assert err.value.log.endswith("bad\nERROR: " + PODMAN_FAILURE[-1]["error"].strip())


def test_error_detail_alone_is_a_failure_too() -> None:
    with pytest.raises(BuildFailed, match="build failed: unauthorized"):
        follow_build_stream([{"errorDetail": {"message": "unauthorized"}}], lambda event: None)


def test_pull_status_items_become_log_lines() -> None:
    events: list[BuildEvent] = []
    follow_build_stream([{"status": "Downloading", "id": "abc", "progress": "[==>  ]"}], events.append)
    assert [e.line for e in events] == ["abc Downloading [==>  ]"]


def test_context_digest_depends_on_paths_contents_and_modes() -> None:
    base = context_digest([ContextFile("Dockerfile", b"FROM a\n", 0o644)])
    assert base == context_digest([ContextFile("Dockerfile", b"FROM a\n", 0o644)])
    assert base != context_digest([ContextFile("Dockerfile", b"FROM b\n", 0o644)])
    assert base != context_digest([ContextFile("Dockerfile2", b"FROM a\n", 0o644)])
    assert base != context_digest([ContextFile("Dockerfile", b"FROM a\n", 0o755)])


def test_apptainer_argv_with_and_without_fakeroot() -> None:
    out = Path("/cache/builds/abc.sif")
    assert build_argv("/usr/bin/apptainer", out, fakeroot=True) == [
        "/usr/bin/apptainer", "build", "--fakeroot", "/cache/builds/abc.sif", "Singularity.def"]
    assert build_argv("singularity", out, fakeroot=False) == ["singularity", "build", "/cache/builds/abc.sif",
                                                              "Singularity.def"]
    assert build_argv("singularity", out, fakeroot=False, nohttps="--nohttps")[2] == "--nohttps"


def test_the_plain_http_flag_is_spelled_as_the_binary_lists_it() -> None:
    """Apptainer 1.4 refuses SingularityCE 3.x's ``--nohttps``; 3.x before 3.7 knows only that one."""
    assert nohttps_flag("      --no-https                 use http instead of https for docker://") == "--no-https"
    assert nohttps_flag("      --nohttps   do NOT use HTTPS with the docker:// transport") == "--nohttps"


FULL, NO_SYS_RESOURCE = "CapBnd:\t000001ffffffffff\n", "CapBnd:\t000001fffeffffff\n"  # bit 24: CAP_SYS_RESOURCE


def test_fakeroot_for_users_and_for_root_without_every_capability() -> None:
    """singularity hands a root build's %post every capability; a bounding set without one fails in its starter."""
    assert not needs_fakeroot(0, FULL, 40) and needs_fakeroot(1000, FULL, 40)
    assert needs_fakeroot(0, NO_SYS_RESOURCE, 40)
    assert not needs_fakeroot(0, "CapBnd:\t000000ffffffffff\n", 39)  # an older kernel knows fewer


@pytest.mark.parametrize(("definition", "registry"), [
    ("Bootstrap: docker\nFrom: localhost:5000/team/debian:bookworm\n\n%post\n  From: x/y\n", "localhost:5000"),
    ("bootstrap: docker\nfrom: nvcr.io/nvidia/pytorch:24.06-py3\n", "nvcr.io"),
    ("Bootstrap: docker\nFrom: debian:bookworm\n", None),
    ("Bootstrap: localimage\nFrom: /tmp/base.sif\n", None),
])
def test_the_base_registry_of_a_definition(definition: str, registry: str | None) -> None:
    assert base_registry(definition) == registry


def test_apptainer_failing_section_from_its_log() -> None:
    log = ["INFO:    Starting build...", "INFO:    Running post scriptlet", "+ false",
           "FATAL:   While performing build: while running engine: exit status 1"]
    assert failing_section(log) == "%post"
    assert failing_section(["FATAL: no such file"]) is None


def test_fallback_sockets_include_rootless_podman() -> None:
    assert fallback_sockets({"XDG_RUNTIME_DIR": "/run/user/1000"}) == [
        "unix:///var/run/docker.sock", "unix:///run/podman/podman.sock", "unix:///run/user/1000/podman/podman.sock"]
    assert fallback_sockets({}) == ["unix:///var/run/docker.sock", "unix:///run/podman/podman.sock"]


@pytest.mark.parametrize(("headers", "expected"), [
    ({"Server": "Libpod/4.3.1 (linux)", "Libpod-Api-Version": "4.3.1", "Api-Version": "1.41"}, "podman 4.3.1"),
    ({"Server": "Docker/27.0.3 (linux)", "Api-Version": "1.46"}, "docker 27.0.3"),
    ({}, "docker ?"),
])
def test_server_name_from_ping_headers(headers: dict[str, str], expected: str) -> None:
    assert server_name(headers) == expected


def test_the_build_key_joins_the_rendered_dockerfiles_closing_label() -> None:
    from buildkit.engine.base import BuildRequest
    from buildkit.engine.docker import labelled
    from buildkit.recipe.catalog import Catalog
    from buildkit.render.context import build_context

    context = build_context(Catalog.from_dirs().resolve("demo"), "docker")
    request = BuildRequest(context, "k" * 64, "localhost/demo:1", {"org.opencontainers.image.base.digest": 'sha:"x"'})
    sent, beside = labelled(request)
    assert beside == {}  # nothing for the engine to turn into steps of their own
    dockerfile = next(f.data.decode() for f in sent if f.path == "Dockerfile")
    original = next(f.data.decode() for f in context if f.path == "Dockerfile")
    assert dockerfile == original.rstrip("\n") + (' \\\n    org.opencontainers.image.base.digest="sha:\\"x\\""'
                                                  ' \\\n    io.ckit.build.key="' + "k" * 64 + '"\n')
    assert [f.path for f in sent] == [f.path for f in context] and context_digest(context) != context_digest(sent)


def test_a_dockerfile_that_does_not_end_with_label_gets_the_labels_beside_it() -> None:
    from buildkit.engine.base import BuildRequest
    from buildkit.engine.docker import labelled

    context = [ContextFile("Dockerfile", b'FROM x\nLABEL a="1"\nCMD ["sh"]\n', 0o644)]
    sent, beside = labelled(BuildRequest(context, "key", "t"))
    assert sent == context and beside == {"io.ckit.build.key": "key"}


def test_the_users_proxy_goes_to_the_build_as_docker_s_predefined_args() -> None:
    from buildkit.engine.docker import proxy_build_args

    env = {"HTTPS_PROXY": "http://proxy.example.org:3128", "no_proxy": "localhost,.example.org", "HTTP_PROXY": "",
           "PATH": "/usr/bin", "http_proxy": "http://proxy.example.org:3128"}
    assert proxy_build_args(env) == {"HTTPS_PROXY": "http://proxy.example.org:3128",
                                     "http_proxy": "http://proxy.example.org:3128",
                                     "no_proxy": "localhost,.example.org"}
    assert proxy_build_args({"PATH": "/usr/bin"}) == {}
