"""What a build runs again, counted in the engine's log (podman: ``STEP n/N: …``, then ``--> Using cache …`` for
a step it did not run): a one-line code change re-runs the copy of the code and the labels, never an earlier
step; ``--no-cache`` re-runs every step; ``--pull`` builds on the base the registry has now.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from buildkit.engine.base import BuildEvent
from buildkit.orchestration import build as builder
from tests.infra.containers import remove_replaced, run_container

RECIPE = """\
kind: stack
description: demo plus an install step and the user's code last
extends: demo
addons: [shell as install, files as code]
parameters:
  install: {commands: ["echo installing > /opt/installed.txt"]}
  code: {src: app, dest: /workspace/app}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CKIT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "myproject"
    (folder / "stacks").mkdir(parents=True)
    (folder / "stacks/myapp.yaml").write_text(RECIPE)
    (folder / "app").mkdir()
    (folder / "app/main.py").write_text(f'print("version 1 of {uuid.uuid4().hex}")\n')  # new to the engine
    return folder


class Steps:
    """The steps of one build as the engine logged them: (instruction, whether the engine ran it)."""

    def __init__(self) -> None:
        self.steps: list[list[Any]] = []

    def __call__(self, event: BuildEvent) -> None:
        if event.step is not None:
            self.steps.append([event.line.split(":", 1)[1].strip(), True])
        elif self.steps and event.line.startswith("--> Using cache"):
            self.steps[-1][1] = False

    @property
    def ran(self) -> list[str]:
        """The instructions the engine ran (FROM is never run: it names the base)."""
        return [text for text, ran in self.steps if ran and not text.startswith("FROM ")]


Build = Callable[..., tuple[Steps, builder.BuildResult]]


@pytest.fixture
def build(podman: Any) -> Iterator[Build]:
    """``build(project, tag, **flags)``: ``ckit build myapp`` through the library, with the engine's steps. The
    images a later build replaced under the tag go at the end (their code is the test's own: by ID)."""
    made: list[str] = []

    def run(project: Path, tag: str, **flags: Any) -> tuple[Steps, builder.BuildResult]:
        prepared = builder.prepare("myapp", tag=tag, recipes_dirs=[project], **flags)
        steps = Steps()
        result = builder.execute(prepared.plan, prepared.engine, prepared.context, steps, cached=prepared.cached)
        made.append(str(result.artifacts[0].digest))
        return steps, result

    yield run
    remove_replaced(docker.from_env(), made)


@pytest.fixture
def tag(podman_tags: Callable[[str], str]) -> str:
    return podman_tags(f"localhost/ckit-test/rebuild:{uuid.uuid4().hex[:12]}")


def test_a_one_line_code_change_reruns_only_the_steps_from_the_code_on(debian_image: str, project: Path, tag: str,
                                                                       build: Build) -> None:
    build(project, tag)
    main = project / "app/main.py"
    main.write_text(main.read_text() + 'print("one line more")\n')
    again, result = build(project, tag)
    assert not result.artifacts[0].cache_hit
    # the copy of the code and the labels after it; before, the labels right after FROM (their fingerprint
    # covers the code) made every step run again, the install step and hello's too
    assert [text.split()[0] for text in again.ran] == ["COPY", "LABEL"]
    assert again.ran[0] == 'COPY ["files/2-app", "/workspace/app"]'
    assert f'io.ckit.build.key="{result.plan.build_key}"' in again.ran[1]  # the build key in the same step
    # FROM, then from the engine's cache: ENV, COPY and RUN of hello, RUN install, ENTRYPOINT, CMD
    assert len(again.steps) - len(again.ran) == 7
    status, output = run_container(docker.from_env(), tag, ["/workspace/app/main.py", "/opt/installed.txt"],
                                   entrypoint=["cat"])
    assert status == 0 and output.decode().endswith('print("one line more")\ninstalling\n')
    # and the same inputs again: the image with that build key, nothing built
    third, result = build(project, tag)
    assert third.steps == [] and result.artifacts[0].cache_hit


def test_no_cache_reruns_every_step_even_for_a_build_key_the_engine_has(debian_image: str, project: Path, tag: str,
                                                                         build: Build) -> None:
    first, _ = build(project, tag)
    again, result = build(project, tag, no_cache=True)
    assert not result.artifacts[0].cache_hit
    assert len(again.ran) == len(again.steps) - 1 == len(first.steps) - 1  # all but FROM


def test_pull_builds_on_the_base_the_registry_has_now(debian_image: str, registry: Any, project: Path, tag: str,
                                                      podman_tags: Callable[[str], str], build: Build) -> None:
    client = docker.from_env()
    namespace = f"{registry.host}/ckit-test-pull-{uuid.uuid4().hex[:8]}"
    base = podman_tags(f"{namespace}/debian:bookworm")
    old = client.images.get(debian_image)
    old.tag(*base.rsplit(":", 1))
    push(client, base)
    setting = [f"debian.registry={namespace}"]
    build(project, tag, sets=setting)
    # the registry's base moves on; the engine still has the old one under that name
    newer = podman_tags(f"localhost/ckit-test/newer-base:{uuid.uuid4().hex[:8]}")
    dockerfile = f"FROM {debian_image}\nRUN echo 2 > /base-version && echo {uuid.uuid4().hex} > /base-id\n"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=newer, rm=True)
    client.images.get(newer).tag(*base.rsplit(":", 1))
    push(client, base)
    old.tag(*base.rsplit(":", 1))
    same, result = build(project, tag, sets=setting)
    assert same.steps == [] and result.artifacts[0].cache_hit  # without --pull: the build key's image
    pulled, result = build(project, tag, sets=setting, pull=True)
    assert not result.artifacts[0].cache_hit
    assert len(pulled.ran) == len(pulled.steps) - 1  # on a new base, every step runs again
    status, output = run_container(client, tag, ["/base-version"], entrypoint=["cat"])
    assert (status, output) == (0, b"2\n")


def push(client: Any, ref: str) -> None:
    repo, name = ref.rsplit(":", 1)
    for item in client.api.push(repo, name, stream=True, decode=True):
        assert "error" not in item, item
