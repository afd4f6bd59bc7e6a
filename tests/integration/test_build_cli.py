"""`ckit build` end to end on the real podman service: engine choice, failures, cache hits, conversion, --locked."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest

from buildkit import __version__, process
from buildkit.cli import main
from buildkit.engine.base import BuildListener, BuildRequest, BuiltImage
from buildkit.engine.docker import DockerEngine
from buildkit.orchestration import build as builder
from tests.infra.containers import run_container


def ckit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


class CountingDockerEngine(DockerEngine):
    """The real docker engine, counting the builds it was asked to run."""

    def __init__(self) -> None:
        super().__init__()
        self.builds = 0

    def build(self, request: BuildRequest, listener: BuildListener) -> BuiltImage:
        self.builds += 1
        return super().build(request, listener)


def test_apptainer_engine_without_apptainer_is_bad_input(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A PATH with neither apptainer nor singularity (this machine has them in /usr/local/bin, tests/infra/apptainer)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert process.which("apptainer") is None and process.which("singularity") is None
    code, out, err = ckit(capsys, "build", "demo", "--engine", "apptainer")
    assert (code, out) == (2, "")
    assert "ckit: error: --engine apptainer: neither apptainer nor singularity is on PATH\n" in err
    assert "hint: install apptainer (or singularity) and put it on PATH, or use --engine docker" in err
    # --dry-run still shows the plan for the named engine, and says it cannot run here
    code, out, err = ckit(capsys, "build", "demo", "--engine", "apptainer", "--dry-run")
    assert code == 0, err
    assert out.startswith("plan: build demo with apptainer (not available here: --engine apptainer: neither "
                          "apptainer nor singularity is on PATH)\n")
    assert "  context      Singularity.def (" in out and "  2. copy the .sif -> demo-" in out


def test_dry_run_prints_the_plan_and_builds_nothing(podman: Any, cache: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    tag = "localhost/ckit-test/dry-run:never-built"
    code, out, err = ckit(capsys, "build", "demo", "--to", "sqsh,image", "--tag", tag, "--dry-run", "--json",
                          "-o", str(cache / "out"))
    assert code == 0, err
    plan = json.loads(out)["plan"]
    assert plan["engine"] == "docker" and plan["engine_reason"].startswith("docker (auto; podman 4.")
    assert plan["targets"] == ["image", "sqsh"] and plan["cached"] is False and plan["tag"] == tag
    assert plan["outputs"] == [{"kind": "sqsh", "path": str(cache / "out" / f"demo-{plan['fingerprint'][:12]}.sqsh")}]
    with pytest.raises(docker.errors.ImageNotFound):
        docker.from_env().images.get(tag)
    assert not (cache / "out").exists()


def test_failing_step_exits_1_naming_the_step_with_the_log(podman: Any, debian_image: str, cache: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    tag = "localhost/ckit-test/failing:1"
    failing = "shell.commands=echo about to fail,echo libfoo missing >&2,exit 7"
    code, out, err = ckit(capsys, "build", "demo", "--set", failing, "--tag", tag)
    assert (code, out) == (1, "")
    step = "step 4/7 (RUN echo about to fail && echo libfoo missing >&2 && exit 7)"
    assert f"ckit: error: build failed at {step}: building at STEP" in err
    assert "exit status 7" in err
    # not on a terminal the log lines were the progress: the error names the step and shows them no second time
    assert err.splitlines().count("libfoo missing") == 1 and err.count("STEP 1/7: FROM") == 1
    assert "hint: the build log is above" in err and "--- last " not in err
    with pytest.raises(docker.errors.ImageNotFound):
        docker.from_env().images.get(tag)
    # quiet: no lines came out, so the error carries the tail, and the whole log is kept in a file it names
    code, out, err = ckit(capsys, "build", "demo", "--set", failing, "--tag", tag, "-q")
    assert (code, out) == (1, "")
    tail = err.split("--- last ", 1)[1]
    assert "about to fail" in tail and err.splitlines().count("libfoo missing") == 1
    log_file = cache / "logs" / "build-demo.log"
    assert f"hint: the whole log is in {log_file}" in err
    assert "STEP 1/7: FROM localhost/debian:bookworm" in log_file.read_text()


def test_second_build_is_a_cache_hit_without_build_work(podman: Any, debian_image: str, cache: Path,
                                                        capsys: pytest.CaptureFixture[str], podman_tags: Any) -> None:
    tag = podman_tags(f"localhost/ckit-test/cache:demo-{uuid.uuid4().hex[:8]}")
    first = builder.prepare("demo", tag=tag)
    engine = CountingDockerEngine()
    builder.execute(first.plan, engine, first.context, lambda event: None)
    again = builder.prepare("demo", tag=tag)
    result = builder.execute(again.plan, engine, again.context, lambda event: None)
    assert again.plan.cached is True and result.artifacts[0].cache_hit is True
    assert engine.builds <= 1  # the first run may itself reuse an image left by an earlier session
    builds_before = engine.builds
    builder.execute(again.plan, engine, again.context, lambda event: None)
    assert engine.builds == builds_before
    labels = docker.from_env().images.get(tag).labels
    assert labels["io.ckit.build.key"] == again.plan.build_key
    assert labels["io.ckit.stack"] == "demo" and labels["io.ckit.fingerprint"] == again.plan.fingerprint
    assert labels["io.ckit.version"] == __version__ and json.loads(labels["io.ckit.parameters"])["debian"] == {
        "registry": "localhost", "release": "bookworm"}

    code, out, err = ckit(capsys, "build", "demo", "--tag", tag, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert [(a["kind"], a["ref"], a["cache_hit"]) for a in summary["artifacts"]] == [("image", tag, True)]
    assert "engine: docker (auto; podman 4." in err and "cache hit: " in err


def test_build_demo_to_image_sif_sqsh(podman: Any, debian_image: str, cache: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from buildkit.image.layers import flatten, headerscan
    from buildkit.image.sources.docker_daemon import DaemonSource

    saves: list[str] = []
    scans: list[str] = []
    real_spool, real_scan = DaemonSource.spool, flatten.scan

    def counting_spool(self, workdir, progress=None):  # type: ignore[no-untyped-def]
        saves.append(self.ref)
        return real_spool(self, workdir, progress)

    def counting_scan(f, start, end, what, **kw):  # type: ignore[no-untyped-def]
        scans.append(what)
        return real_scan(f, start, end, what, **kw)

    monkeypatch.setattr(DaemonSource, "spool", counting_spool)
    monkeypatch.setattr(flatten, "scan", counting_scan)  # a layer read whole
    monkeypatch.setattr(headerscan, "scan", counting_scan)  # a layer read as it streams from podman's storage
    out_dir = tmp_path / "artifacts"
    code, out, err = ckit(capsys, "build", "demo", "--to", "image,sif,sqsh", "-o", str(out_dir), "--json")
    assert code == 0, err
    layers = docker.from_env().images.get(json.loads(out)["artifacts"][0]["ref"]).attrs["RootFS"]["Layers"]
    assert len(scans) == len(layers)  # one pass over each layer's headers for both conversions
    assert saves == []  # podman's layers were read where podman keeps them, without a save
    summary = json.loads(out)
    image, sif, sqsh = summary["artifacts"]
    fp12 = summary["fingerprint"][:12]
    assert (image["kind"], image["ref"]) == ("image", f"localhost/ckit/demo:{fp12}")
    assert (sif["kind"], sif["path"]) == ("sif", str(out_dir / f"demo-{fp12}.sif"))
    assert (sqsh["kind"], sqsh["path"]) == ("sqsh", str(out_dir / f"demo-{fp12}.sqsh"))
    assert sif["digest"] == sqsh["digest"] == image["digest"]  # the image the files were converted from
    for artifact in (sif, sqsh):
        assert Path(artifact["path"]).stat().st_size == artifact["size"] > 1_000_000
    listing = process.run(["siftool", "list", sif["path"]]).stdout
    assert "Squashfs" in listing or "squashfs" in listing.lower()
    files = process.run(["unsquashfs", "-l", "-d", "", sqsh["path"]]).stdout.splitlines()
    assert "/opt/ckit-demo/hello" in files and "/etc/rc" in files

    status, output = run_container(docker.from_env(), image["ref"])
    assert status == 0 and output.decode().startswith("hello from ckit\n")

    code, out, err = ckit(capsys, "build", "demo", "--to", "image,sif,sqsh", "-o", str(out_dir), "--json")
    assert code == 0, err
    again = json.loads(out)
    assert [a["cache_hit"] for a in again["artifacts"]] == [True, True, True]
    assert sorted(p.name for p in out_dir.iterdir()) == [f"demo-{fp12}.sif", f"demo-{fp12}.sqsh"]


def test_locked_build_uses_the_pinned_base_digest(podman: Any, debian_image: str, registry: Any, cache: Path,
                                                  tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    client = docker.from_env()
    namespace = f"{registry.host}/ckit-test"
    client.images.get(debian_image).tag(f"{namespace}/debian", "bookworm")
    for item in client.api.push(f"{namespace}/debian", "bookworm", stream=True, decode=True):
        assert "error" not in item, item
    lock_file = tmp_path / "ckit.lock"
    setting = f"debian.registry={namespace}"
    code, out, err = ckit(capsys, "lock", "demo", "--set", setting, "-o", str(lock_file))
    assert code == 0, err
    lock = json.loads(lock_file.read_text())
    digest = lock["base"]["digest"]

    code, out, err = ckit(capsys, "build", "demo", "--locked", "--lock-file", str(lock_file), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["tag"].endswith("-locked")
    labels = client.images.get(summary["tag"]).labels
    assert labels["org.opencontainers.image.base.digest"] == digest
    assert labels["io.ckit.fingerprint"] == lock["fingerprint"]

    code, out, err = ckit(capsys, "build", "demo", "--locked", "--lock-file", str(lock_file),
                          "--set", "debian.release=trixie")
    assert code == 2
    assert "was written for demo with fingerprint" in err


def test_build_for_a_site_picks_a_compression_its_kernel_mounts(podman: Any, debian_image: str, cache: Path,
                                                                tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """twnia2's CentOS 7 kernel mounts gzip/xz squashfs only: `build --site twnia2` writes gzip, not zstd."""
    from buildkit.image.inspect import superblock
    from buildkit.image.sif.read import read_sif

    assert ckit(capsys, "build", "demo", "--to", "sif", "--site", "nowhere")[0] == 2  # before any build work
    code, out, err = ckit(capsys, "build", "demo", "--to", "sif,sqsh", "-o", str(tmp_path), "--site", "twnia2",
                          "--json")
    assert code == 0, err
    sif, sqsh = json.loads(out)["artifacts"][-2:]
    offset = read_sif(Path(sif["path"])).primary_partition().offset  # type: ignore[union-attr]
    assert superblock(Path(sif["path"]), offset)["compression"] == "gzip"
    assert superblock(Path(sqsh["path"]))["compression"] == "gzip"
    code, _, err = ckit(capsys, "launch", "--site", "twnia2", "--account", "P1", "--image", sif["path"], "--dry-run",
                        "--", "true")
    assert code == 0, err


COUNTING_BUILD = """
import json, sys
from buildkit import daemon
from buildkit.cli import main
asked = []
real = daemon._request
def counting(address, path, timeout):
    asked.append(path)
    return real(address, path, timeout)
daemon._request = counting
code = main(sys.argv[1:])
print(json.dumps({"asked": asked, "loaded": sorted(m for m in ("docker", "requests", "jsonschema") if m in sys.modules)}))
sys.exit(code)
"""


def test_build_to_sqsh_of_a_cached_image_asks_the_engine_once_and_loads_no_sdk(
        podman: Any, debian_image: str, cache: Path, tmp_path: Path, podman_tags: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The start of `ckit build --to sqsh` on a cached image is part of every edit-build-run loop: one ping and one
    # inspect of the engine (the conversion starts from the cache check's answer), and neither the docker SDK
    # nor jsonschema is loaded (podman's socket is spoken to directly; the recipes pass the quick schema check).
    tag = podman_tags(f"localhost/ckit-test/start:demo-{uuid.uuid4().hex[:8]}")
    assert ckit(capsys, "build", "demo", "--tag", tag)[0] == 0
    done = subprocess.run([sys.executable, "-c", COUNTING_BUILD, "build", "demo", "--tag", tag, "--to", "sqsh",  # noqa: S603
                           "-o", str(tmp_path / "out"), "--json"], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr
    *result, counted = done.stdout.splitlines()
    artifacts = json.loads("\n".join(result))["artifacts"]
    assert [(a["kind"], a["cache_hit"]) for a in artifacts] == [("image", True), ("sqsh", False)]
    assert json.loads(counted) == {"asked": ["/_ping", f"/v1.41/images/{tag}/json"], "loaded": []}
    assert Path(artifacts[1]["path"]).stat().st_size == artifacts[1]["size"] > 1_000_000
