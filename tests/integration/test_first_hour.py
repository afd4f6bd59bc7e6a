"""The first hour, run for real: the README's first section in a fresh venv outside the repository, the
README's first recipe built and run, a rendered build context built by podman, progress in a terminal,
completion in bash, and a failing build whose log is shown once.

Docker Hub is unreachable here and PyPI is behind a proxy that re-signs TLS, so the test registry stands in for
Docker Hub the way a site mirror would, in the two ways the docs give: for the first section a recipe folder on
``CKIT_RECIPES_PATH`` carries a ``bases/debian.yaml`` whose registry is the test registry, and the commands run
exactly as the README prints them; the first recipe is built by the docs' worked example for offline and proxied
machines (``--set debian.registry=MIRROR/library --set pip.cert=pip-ca.pem``), the mirror's name put in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from buildkit.cli import main
from tests import doctext
from tests.integration.terminal import record_in_a_terminal
from tests.testdata import sif_dir
from tests.unit.test_first_hour_rules import README, write_readme_project

ROOT = Path(__file__).resolve().parents[2]


def readme_commands(heading: str) -> list[str]:
    """The ``$ `` lines of the first console block after ``heading``."""
    block = README.split(heading, 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


@pytest.fixture(scope="module")
def fresh_ckit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install`` of this worktree into a new venv in a temp dir; returns the venv's bin folder."""
    venv = tmp_path_factory.mktemp("first-hour") / "ckit-env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           str(ROOT)], cwd=venv.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return venv / "bin"


@pytest.fixture(scope="module")
def mirror(podman: Any, debian_image: str, registry: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recipe folder whose debian base comes from the test registry (Docker Hub's debian:bookworm there)."""
    client = docker.from_env()
    repo = f"{registry.host}/library/debian"
    client.images.get(debian_image).tag(repo, "bookworm")
    for item in client.api.push(repo, "bookworm", stream=True, decode=True):
        assert "error" not in item, item
    folder = tmp_path_factory.mktemp("mirror")
    base = yaml.safe_load((ROOT / "recipes/bases/debian.yaml").read_text())
    base["parameters"]["registry"]["default"] = f"{registry.host}/library"
    (folder / "bases").mkdir()
    (folder / "bases/debian.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    return folder


def user_env(bin_dir: Path, home: Path, mirror: Path | None) -> dict[str, str]:
    """A user's shell: the venv first on PATH, docker = podman, the mirror folder (if any), a cache of its own."""
    shims = home / ".shims"
    shims.mkdir(parents=True, exist_ok=True)
    (shims / "docker").write_text('#!/bin/sh\nexec podman "$@"\n')
    (shims / "docker").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CKIT_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{bin_dir}:{shims}:{os.environ['PATH']}", HOME=str(home),
               CKIT_CACHE_DIR=str(home / ".cache/ckit"), COLUMNS="160")
    if mirror is not None:
        env["CKIT_RECIPES_PATH"] = str(mirror)
    return env


def run_lines(lines: list[str], cwd: Path, env: dict[str, str]) -> dict[str, str]:
    outputs = {}
    for line in lines:
        done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"$ {line}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        outputs[line] = done.stdout + done.stderr
    return outputs


def test_readme_first_section_in_a_fresh_venv(fresh_ckit: Path, mirror: Path, tmp_path: Path) -> None:
    lines = readme_commands("## The first hour")
    setup, commands = [line.split("  #")[0].strip() for line in lines[:2]], lines[2:]
    # the venv and the pip install are what the fixture did, from outside the repository
    assert setup == ["python3 -m venv ckit-env && . ckit-env/bin/activate", "pip install ./ckit"]
    home = tmp_path / "home"
    home.mkdir()
    out = run_lines(commands, home, user_env(fresh_ckit, home, mirror))
    by_command = {line.split()[1]: text for line, text in out.items() if line.startswith(("ckit", "docker"))}
    assert "  hello " in by_command["recipes"]
    assert sorted(str(p.relative_to(home / "hello")) for p in (home / "hello").rglob("*") if p.is_file()) == [
        "Dockerfile", "files/1-demo/hello"]
    assert "hello from ckit" in by_command["run"]
    assert "# enroot-provenance: dockerd://localhost/hello:1" in by_command["inspect"]
    assert "--container-image=" in by_command["launch"] and "hello-" in by_command["launch"]
    images = sorted(p.suffix for p in (home / "images").iterdir())
    assert images == [".sif", ".sqsh"]
    # and the lock of the Building section, against the registry the base comes from
    out = run_lines(["ckit lock hello && ckit build hello --locked"], home, user_env(fresh_ckit, home, mirror))
    assert "locked hello: " in next(iter(out.values()))


def offline_example(registry_host: str) -> list[str]:
    """The docs' worked example for a machine offline or behind a proxy, with the test registry as the mirror."""
    block = doctext.between("\n## Offline or behind a proxy", "\n## Converting").split("```console\n", 1)[1]
    lines = [line[2:] for line in block.split("```", 1)[0].splitlines() if line.startswith("$ ")]
    assert any("--set debian.registry=mirror.example.org/library" in line for line in lines)
    return [line.replace("mirror.example.org/library", f"{registry_host}/library") for line in lines]


def test_readme_first_recipe_builds_and_runs(podman: Any, mirror: Path, registry: Any, tmp_path: Path) -> None:
    # Docker Hub through the test registry, PyPI through this machine's TLS-inspecting proxy (its CA is in the
    # host's bundle): the first recipe as the docs' worked example builds it, no recipe folder of the test's own
    write_readme_project(tmp_path)
    lines = readme_commands("### Your first recipe")
    assert lines[-1] == "docker run --rm localhost/myapp:1"
    example = offline_example(registry.host)
    assert example[-1] == lines[-1]
    show = run_lines(lines[:1], tmp_path, user_env(Path(sys.executable).parent, tmp_path, None))[lines[0]]
    assert "python" in show and "tabulate==0.9.0" in show
    out = run_lines(example, tmp_path, user_env(Path(sys.executable).parent, tmp_path, None))
    assert "registry = docker.io/library" in out[example[0]]  # where the parameter to set is shown
    assert "ckit  works" in out[example[-1]]  # pip package and user code, run by the venv's python


def test_rendered_folder_builds_with_podman(podman: Any, debian_image: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    ctx = tmp_path / "ctx"
    assert main(["render", "demo", "-o", f"{ctx}/"]) == 0
    assert main(["render", "demo", "--format", "singularity", "-o", f"{ctx}/"]) == 0
    tag = f"localhost/ckit-test/rendered:{os.getpid()}"
    built = subprocess.run(["podman", "build", "-t", tag, str(ctx)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    try:
        ran = subprocess.run(["podman", "run", "--rm", tag], capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0 and "hello from ckit" in ran.stdout, ran.stderr
    finally:
        subprocess.run(["podman", "rmi", "-f", tag], capture_output=True)
    # the .def's %files name files that are in the folder (apptainer builds from inside it)
    section = (ctx / "Singularity.def").read_text().split("\n%files\n", 1)[1].split("\n%", 1)[0]
    sources = [line.split()[0] for line in section.splitlines() if line.strip()]
    assert sources and all((ctx / src).exists() for src in sources)


def test_progress_in_a_terminal_shows_eta_and_nothing_stale(podman: Any, debian_image: str, tmp_path: Path,
                                                            podman_tags: Callable[[str], str]) -> None:
    env = {**os.environ, "CKIT_CACHE_DIR": str(tmp_path / "cache"), "TERM": "xterm-256color", "COLUMNS": "150"}
    unique = f"echo {time.time_ns()}"  # a new build key: the build really runs its steps
    tag = podman_tags(f"localhost/ckit-test/pty:{uuid.uuid4().hex[:12]}")
    argv = [str(Path(sys.executable).parent / "ckit"), "build", "demo", "--set", f"shell.commands={unique}",
            "--tag", tag, "--to", "image,sqsh", "-o", str(tmp_path / "out")]
    code, screen = record_in_a_terminal(argv, env, tmp_path)
    assert code == 0, screen
    assert re.search(r"building demo, step \d/\d: ", screen), screen
    assert re.search(r"writing \.sqsh \(zstd:-3\) .*/\d+\.\d MB .*[kMG]B/s +eta 0:\d\d:\d\d", screen), screen
    assert "None" not in screen and "0/?" not in screen
    # one line per piece of work: once the conversion draws, the build's line is never drawn again
    assert "building demo, step" not in screen[screen.index("writing .sqsh"):]


def test_bash_completion_loads_and_completes(tmp_path: Path) -> None:
    ckit = shutil.which("ckit", path=str(Path(sys.executable).parent))
    assert ckit
    script = tmp_path / "ckit.bash"
    script.write_text(subprocess.run([ckit, "completion", "bash"], capture_output=True, text=True,
                                     check=True).stdout)
    probe = (f"source {script}; complete -p ckit; "
             "COMP_WORDS=(ckit bu); COMP_CWORD=1; _ckit_completion ckit; echo \"A:${COMPREPLY[*]}\"; "
             "COMP_WORDS=(ckit build he); COMP_CWORD=2; _ckit_completion ckit; echo \"B:${COMPREPLY[*]}\"; "
             "COMP_WORDS=(ckit convert x --com); COMP_CWORD=3; _ckit_completion ckit; echo \"C:${COMPREPLY[*]}\"; "
             "COMP_WORDS=(ckit sites show t); COMP_CWORD=3; _ckit_completion ckit; echo \"D:${COMPREPLY[*]}\"")
    env = {**os.environ, "PATH": f"{Path(ckit).parent}:{os.environ['PATH']}"}
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env=env, check=True).stdout
    assert "complete -o default -F _ckit_completion ckit" in out
    assert "A:build" in out and "B:hello" in out and "C:--compress" in out and "D:tara twnia2" in out
    # --install-completion writes it where bash finds it
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(["bash", "-c", f"{ckit} --install-completion"],
                          capture_output=True, text=True, env={**env, "HOME": str(home), "SHELL": "/bin/bash"})
    assert done.returncode == 0, done.stderr
    assert "ckit" in (home / ".bashrc").read_text()


class RecordingMeter:
    """A :class:`buildkit.progress.Meter` that remembers what it was told."""

    def __init__(self) -> None:
        self.totals: list[int | None] = []
        self.done = 0

    def __call__(self, done: int) -> None:
        self.done += done

    def total(self, total: int | None, *, completed: int | None = None) -> None:
        self.totals.append(total)

    def describe(self, text: str) -> None:
        pass


def test_a_pull_tells_its_meter_the_size(registry: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # before: the pull's bar had no total ("0/? bytes"): the size in the manifest never reached it
    from buildkit.registry.distribution.client import RegistryClient
    from buildkit.registry.distribution.reference import parse
    from buildkit.registry.transfer.artifacts import pull_artifact

    sif = sif_dir() / "busybox_amd64.sif"
    ref = f"{registry.host}/ckit-test/first-hour:meter-{os.getpid()}"
    assert main(["push", str(sif), ref]) == 0, capsys.readouterr().err
    meter = RecordingMeter()
    pulled = pull_artifact(RegistryClient.for_reference(parse(ref)), parse(ref), tmp_path, meter, total=meter.total)
    assert meter.totals == [sif.stat().st_size] and meter.done == sif.stat().st_size == pulled.size
