"""``ckit launch --code`` on the real local Slurm: the job runs the code folder as it was at launch, laid over an
image holding an older copy, on both nodes of partition multi, with podman, Charliecloud's ch-run,
Apptainer (tara's singularity runtime, as this machine has it) and no container; an edit and a second launch run the new
code from the same image file, neither rebuilt nor reconverted.

The image: busybox with ``/workspace/app/main.sh`` saying ``image``, built by podman and converted to ``.sqsh``
and ``.sif`` by ``ckit convert``; the code folder's ``main.sh`` says which edit it is.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.containers import remove_images
from tests.integration.folders import readable_folder
from tests.integration.registry_helpers import ckit, unique_repo
from tests.integration.singularity_helpers import SITE_ARGS, site_for_this_machine

MAIN = 'echo "CODE {version} on $(hostname) from $CKIT_CODE digest $CKIT_CODE_DIGEST"\n'


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    """Readable by every user and on the file system both nodes see (ch-run and singularity read it)."""
    with readable_folder("ckit-code-") as path:
        yield path


@pytest.fixture(scope="module")
def image(podman: Any, busybox_image: str, folder: Path) -> Iterator[str]:
    """busybox holding its own (old) copy of the code at /workspace/app."""
    import docker

    from buildkit.engine.base import BuildRequest
    from buildkit.engine.docker import DockerEngine
    from buildkit.render.context import ContextFile

    tag = f"localhost/ckit-code/{unique_repo('app')}:1"
    dockerfile = f"FROM {busybox_image}\nCOPY main.sh /workspace/app/main.sh\n".encode()
    context = [ContextFile("Dockerfile", dockerfile, 0o644),
               ContextFile("main.sh", MAIN.format(version="image").encode(), 0o755)]
    DockerEngine().build(BuildRequest(context, "code-image", tag), lambda event: None)
    yield tag
    remove_images(docker.from_env(), [tag])


@pytest.fixture(scope="module")
def converted(image: str, folder: Path) -> dict[str, Path]:
    out = {}
    for target in ("sqsh", "sif"):
        path = folder / f"app.{target}"
        made = ckit("convert", f"docker-daemon:{image}", "--to", target, "--compress", "gzip", "-o", str(path))
        assert made.returncode == 0, made.stderr
        out[target] = path
    return out


def _launch(submit: Path, env: dict[str, str], *args: str) -> tuple[dict[str, Any], str]:
    ran = ckit("launch", "--json", "-J", "code", "--submit", "--wait", *args, "--", "sh",
               "${CKIT_CODE}/main.sh", env=env, cwd=submit)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    log = (submit / f"code-{result['job_id']}.out").read_text(errors="replace")
    return result, log


def _runtime_args(runtime: str, image: str, converted: dict[str, Path], modules: Path) -> list[str]:
    if runtime == "singularity":  # tara's singularity module: Debian's Apptainer here
        return ["--site", "tara", *SITE_ARGS["tara"], "-N", "2", "--env", f"MODULEPATH={modules}", "--runtime",
                "singularity", "--image", str(converted["sif"])]
    common = ["--site", "local", "-p", "multi", "-N", "2", "--runtime", runtime]
    if runtime == "none":
        return common
    return [*common, "--image", image if runtime == "podman" else str(converted["sqsh"])]


@pytest.mark.parametrize("runtime", ["podman", "charliecloud", "singularity", "none"])
def test_the_job_runs_the_code_as_launched_and_an_edit_needs_no_new_image(
        runtime: str, slurm: Any, charliecloud: Any, apptainer: Any, image: str, converted: dict[str, Path],
        folder: Path) -> None:
    submit = Path(tempfile.mkdtemp(prefix=f"job-{runtime}-", dir=folder))
    submit.chmod(0o755)
    code = submit / "app"
    code.mkdir()
    env = {"CKIT_CACHE_DIR": str(submit / "cache"),
           "CKIT_SITES_PATH": str(site_for_this_machine("tara", submit, slurm.cpus))}
    dest = "" if runtime == "none" else ":/workspace/app"
    args = _runtime_args(runtime, image, converted, apptainer.modulefiles)
    def state() -> dict[Path, tuple[int, int, int, int]]:  # not atime: a job reads the image
        return {p: (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ctime_ns)
                for p in converted.values()}

    before = state()
    for version in ("edit-1", "edit-2"):
        (code / "main.sh").write_text(MAIN.format(version=version))
        result, log = _launch(submit, env, *args, "--code", f"{code}{dest}")
        shipped = result["code"]
        where = "/workspace/app" if dest else shipped["folder"]
        lines = sorted(line for line in log.splitlines() if line.startswith("CODE "))
        assert len(lines) == 2 and all(line.startswith(f"CODE {version} on ") and
                                       line.endswith(f"from {where} digest {shipped['digest']}")
                                       for line in lines), log
        assert "CODE image" not in log
        record = json.loads(next((submit / "cache/jobs").glob(f"{result['job_id']}@*.json")).read_text())
        assert record["code"] == shipped["digest"] and record["code_source"] == str(code)
    assert state() == before  # the image files: neither rewritten nor replaced
