"""Two images on one Debian base, converted from podman into a fresh store, the one that changes the base's files
first: the second conversion replays the base layer from the first one's record, then finds that a fragment
block holds files the first image had deleted, so it reads the base layer after all, after its reading phase
ended. That late read reports through the reading's meter, whose line is gone: it must report nowhere and
the conversion succeed (before, ``ckit: internal error: KeyError: 0`` on a terminal, with -q and with --json).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.engine.base import BuildRequest
from buildkit.engine.docker import DockerEngine
from buildkit.image.convert import convert
from buildkit.progress import Meter, Unit
from buildkit.render.context import ContextFile
from buildkit.storage.store import Store
from tests.integration.terminal import record_in_a_terminal

CKIT = str(Path(sys.executable).parent / "ckit")


def build(base: str, tag: str, run: str) -> str:
    dockerfile = f"FROM {base}\nRUN {run}\n".encode()
    DockerEngine().build(BuildRequest([ContextFile("Dockerfile", dockerfile, 0o644)], uuid.uuid4().hex, tag),
                         lambda event: None)
    return tag


@pytest.fixture(scope="module")
def two_images(debian_image: str) -> Iterator[tuple[str, str]]:
    """(an image that deletes some of the base's small files, one that keeps them all), both on the base."""
    import docker

    run = uuid.uuid4().hex[:10]
    fewer = build(debian_image, f"localhost/ckit-test/myapp:{run}", "rm /etc/debian_version /etc/issue /etc/issue.net")
    whole = build(debian_image, f"localhost/ckit-test/demo:{run}", "echo demo > /demo.txt")
    yield fewer, whole
    from tests.infra.containers import remove_images

    remove_images(docker.from_env(), [fewer, whole])


class _Counting:
    def __init__(self) -> None:
        self.ended, self.late = False, 0

    def __call__(self, done: int) -> None:
        self.late += self.ended

    def total(self, total: int | None, *, completed: int | None = None) -> None:
        self.late += self.ended

    def describe(self, text: str) -> None:
        self.late += self.ended


class LateReports:
    """A reporter that counts, per meter, the calls made after its block ended."""

    def __init__(self) -> None:
        self.meters: dict[str, _Counting] = {}

    @contextmanager
    def meter(self, description: str, *, total: int | None = None, unit: Unit = "bytes") -> Iterator[Meter]:
        counting = self.meters[description] = _Counting()
        yield counting
        counting.ended = True


def test_the_second_image_reads_a_layer_after_the_reading_ended(two_images: tuple[str, str], tmp_path: Path) -> None:
    fewer, whole = two_images
    store = Store(tmp_path / "store")
    convert(f"docker-daemon:{fewer}", "sqsh", store=store)
    reports = LateReports()
    second = convert(f"docker-daemon:{whole}", "sqsh", store=store, progress=reports)
    assert second.reused_bytes > 0  # the base layer's record was used…
    assert reports.meters["reading layers"].late > 0  # …and the base layer read after its meter ended


@pytest.mark.parametrize(("target", "how"), [("sqsh", "terminal"), ("sif", "terminal"), ("sif", "-q"),
                                             ("sqsh", "--json")])
def test_converting_the_second_image_succeeds(two_images: tuple[str, str], tmp_path: Path, target: str, how: str,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    fewer, whole = two_images
    monkeypatch.setenv("CKIT_CACHE_DIR", str(tmp_path / "cache"))  # a fresh store
    out = tmp_path / f"whole.{target}"
    assert main(["-q", "convert", f"docker-daemon:{fewer}", "--to", target, "-o", str(tmp_path)]) == 0
    argv = ["convert", f"docker-daemon:{whole}", "--to", target, "-o", str(out)]
    if how == "terminal":
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "150"}
        code, screen = record_in_a_terminal([CKIT, *argv], env, tmp_path)
        assert code == 0 and "internal error" not in screen, screen
        assert f"writing .{target} (" in screen  # the bars were drawn
    else:
        capsys.readouterr()
        assert main([*argv, how]) == 0, capsys.readouterr().err
        if how == "--json":
            assert json.loads(capsys.readouterr().out)["path"] == str(out)
    assert out.is_file()


def test_the_other_order_reads_no_layer_late(two_images: tuple[str, str], tmp_path: Path) -> None:
    """The other order never reads late: the first image's records hold every file the second keeps."""
    fewer, whole = two_images
    store = Store(tmp_path / "store")
    convert(f"docker-daemon:{whole}", "sqsh", store=store)
    reports = LateReports()
    convert(f"docker-daemon:{fewer}", "sqsh", store=store, progress=reports)
    assert reports.meters["reading layers"].late == 0

