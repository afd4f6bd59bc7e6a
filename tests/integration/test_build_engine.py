"""The docker engine against the real podman service (docker SDK over DOCKER_HOST)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import docker
import pytest

from buildkit.engine.base import BuildEvent, BuildFailed, BuildRequest
from buildkit.engine.docker import DockerEngine
from buildkit.engine.select import select_engine
from buildkit.errors import ConfigError
from buildkit.render.context import ContextFile
from tests.infra.containers import run_container

KEY = "io.ckit.build.key"


def dockerfile(*lines: str) -> ContextFile:
    text = "FROM localhost/busybox:1.36\n" + "".join(f"{line}\n" for line in lines)
    return ContextFile("Dockerfile", text.encode(), 0o644)


def unique(tag: str) -> str:
    """A tag of this run: other sessions build in the same podman store (each test removes its tags)."""
    return f"localhost/ckit-test/engine:{tag}-{uuid.uuid4().hex[:8]}"


def test_builds_an_image_with_labels_and_files(busybox_image: str, podman_tags: Callable[[str], str]) -> None:
    tag = podman_tags(unique("ok"))
    engine = DockerEngine()
    events: list[BuildEvent] = []
    context = [dockerfile("COPY files/hello.txt /hello.txt", "RUN echo built > /built.txt",
                          'CMD ["cat", "/hello.txt", "/built.txt"]'),
               ContextFile("files/hello.txt", b"hello from the context\n", 0o644)]
    built = engine.build(BuildRequest(context, "k1", tag, {"org.example.x": "y"}), events.append)
    assert built.cache_hit is False and built.image_id and built.image_id.startswith("sha256:")
    steps = [(e.step, e.steps) for e in events if e.step]
    total = steps[0][1]  # 4 Dockerfile steps; podman adds one LABEL step per label (given one + the build key)
    assert total == 6 and steps == [(n, total) for n in range(1, total + 1)]
    client = docker.from_env()
    labels = client.images.get(tag).labels
    assert labels[KEY] == "k1" and labels["org.example.x"] == "y"  # the build key label is the engine's
    assert run_container(client, tag) == (0, b"hello from the context\nbuilt\n")


def test_failing_run_step_names_the_step_and_shows_the_log_tail(busybox_image: str,
                                                                podman_tags: Callable[[str], str]) -> None:
    context = [dockerfile("RUN echo first step ran", "RUN echo 'cannot find libfoo' >&2; exit 3", "RUN echo never")]
    with pytest.raises(BuildFailed) as err:
        DockerEngine().build(BuildRequest(context, "k2", podman_tags(unique("fail"))), lambda event: None)
    # 4 Dockerfile steps; podman counts the build key label as a 5th
    step = "step 3/5 (RUN echo 'cannot find libfoo' >&2; exit 3)"
    assert err.value.step == step
    message = str(err.value)
    assert message.startswith(f"build failed at {step}: ")
    assert "exit status 3" in message.splitlines()[0]
    tail = message.split("--- last ", 1)[1]
    assert "first step ran" in tail and "cannot find libfoo" in tail
    assert "never" not in err.value.log.replace("RUN echo never", "")


def test_error_item_without_a_run_step_is_a_failure(busybox_image: str, podman_tags: Callable[[str], str]) -> None:
    # COPY of a file the context does not have: the daemon reports it only as an error item in the stream.
    context = [dockerfile("COPY missing.txt /missing.txt")]
    tag = podman_tags(unique("missing"))
    with pytest.raises(BuildFailed) as err:
        DockerEngine().build(BuildRequest(context, "k3", tag), lambda event: None)
    assert err.value.step == "step 2/3 (COPY missing.txt /missing.txt)"
    assert "missing.txt" in str(err.value).splitlines()[0]
    with pytest.raises(docker.errors.ImageNotFound):
        docker.from_env().images.get(tag)


def test_cached_needs_the_same_build_key(busybox_image: str, podman_tags: Callable[[str], str]) -> None:
    engine = DockerEngine()
    request = BuildRequest([dockerfile("LABEL purpose=cache")], "key-a", podman_tags(unique("cache")))
    engine.build(request, lambda event: None)
    calls: list[str] = []  # a lookup builds nothing and saves nothing (counted, not timed)
    for name in ("build", "get_image"):
        real = getattr(engine.client.api, name)
        setattr(engine.client.api, name, lambda *a, _name=name, _real=real, **k: calls.append(_name) or _real(*a, **k))
    hit = engine.cached(request)
    assert hit is not None and hit.cache_hit and calls == []
    assert docker.from_env().images.get(request.tag).labels[KEY] == "key-a"
    assert engine.cached(BuildRequest(request.context, "key-b", request.tag)) is None
    assert engine.cached(BuildRequest(request.context, "key-a", unique("absent"))) is None


def test_probe_and_auto_pick_the_podman_service(podman: object) -> None:
    found = DockerEngine().probe()
    assert found.ok and found.detail.startswith("podman 4.")
    selection = select_engine("auto")
    assert selection.engine.name == "docker"
    assert selection.reason.startswith("docker (auto; podman 4.")


def test_unreachable_engine_says_how_to_start_one(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    with pytest.raises(ConfigError) as err:
        select_engine("docker")
    assert err.value.exit_code == 2
    assert f"--engine docker: cannot reach a Docker API engine (unix://{tmp_path}/nothing.sock: " in str(err.value)
    assert "podman system service" in (err.value.hint or "")


BUILD_IN_A_FRESH_PYTHON = """
import json, sys
from buildkit.engine.base import BuildRequest
from buildkit.engine.docker import DockerEngine
from buildkit.render.context import ContextFile
context = [ContextFile("Dockerfile", b"FROM localhost/busybox:1.36\\nRUN echo built > /built.txt\\nLABEL a=b\\n", 0o644)]
lines = []
built = DockerEngine().build(BuildRequest(context, sys.argv[2], sys.argv[1]), lambda event: lines.append(event.line))
print(json.dumps({"sdk": "docker" in sys.modules, "id": built.image_id, "lines": lines}))
"""


@pytest.mark.parametrize("docker_config", [False, True])
def test_a_build_loads_the_sdk_only_to_send_a_docker_configs_credentials(
        busybox_image: str, podman_tags: Callable[[str], str], tmp_path, docker_config: bool) -> None:
    import json
    import os
    import subprocess
    import sys

    home = tmp_path / "home"
    if docker_config:
        (home / ".docker").mkdir(parents=True)
        (home / ".docker/config.json").write_text('{"auths": {}}')
    tag = podman_tags(unique("sdk"))
    env = {**os.environ, "HOME": str(home)}
    env.pop("DOCKER_CONFIG", None)
    done = subprocess.run([sys.executable, "-c", BUILD_IN_A_FRESH_PYTHON, tag, uuid.uuid4().hex], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["sdk"] is docker_config  # without a config file, the build went over the socket directly
    assert "STEP 3/3: LABEL a=b" in " ".join(result["lines"]) and result["id"].startswith("sha256:")
    client = docker.from_env()
    assert client.images.get(tag).labels[KEY] and run_container(client, tag, ["cat", "/built.txt"]) == (0, b"built\n")
