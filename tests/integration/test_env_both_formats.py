"""One recipe, one environment: the image under podman, the .sif ``ckit convert`` makes of it and the .sif
singularity builds from the rendered .def give the same variables, run by the real Apptainer (Debian's 1.4.5).

The recipe sets PATH in two env steps, as the README's first recipe does (hello's folder, then the venv's), and
appends a third folder in a later one. Before, the .def's ``%environment`` kept only the last assignment, so
``hello`` ran under docker and was not found in the .def's .sif. The converted .sif carries the image's own
environment (``/.singularity.d/env`` written from the image config); the .def's carries ``%environment``, which
singularity sources after the base image's environment: both must agree with the image.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from buildkit.image.convert import convert
from buildkit.orchestration import build as builder
from buildkit.storage.store import Store
from tests.infra.containers import run_container
from tests.integration.registry_helpers import ckit, unique_repo

RECIPE = """\
kind: stack
description: demo, then a tool folder before PATH and one more after it
extends: demo
addons: [files as tool, env as toolpath, env as late]
parameters:
  tool: {src: tool, dest: /opt/tool}
  toolpath: {vars: ["PATH=/opt/tool/bin:$PATH", "TOOL_HOME=/opt/tool"]}
  late: {vars: ["PATH=$PATH:/opt/late/bin"]}
"""
PROBE = ('printf "PATH=%s\\nTOOL_HOME=%s\\n" "$PATH" "$TOOL_HOME"; command -v hello; command -v tool; '
         "hello --greet | head -1; tool")
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # localhost/debian:bookworm's
EXPECTED = (f"PATH=/opt/tool/bin:/opt/ckit-demo:{BASE_PATH}:/opt/late/bin\nTOOL_HOME=/opt/tool\n"
            "/opt/ckit-demo/hello\n/opt/tool/bin/tool\nhello from ckit\ntool from /opt/tool\n")


def write_project(folder: Path) -> Path:
    (folder / "stacks").mkdir(parents=True)
    (folder / "stacks/envcheck.yaml").write_text(RECIPE)
    (folder / "tool/bin").mkdir(parents=True)
    (folder / "tool/bin/tool").write_text('#!/bin/sh\necho "tool from $TOOL_HOME"\n')
    (folder / "tool/bin/tool").chmod(0o755)
    return folder


def test_the_image_its_sif_and_the_defs_sif_have_the_same_environment(
        podman: Any, debian_image: str, registry: Any, apptainer: Any, tmp_path: Path,
        podman_tags: Callable[[str], str], monkeypatch: Any) -> None:
    monkeypatch.setenv("CKIT_CACHE_DIR", str(tmp_path / "cache"))
    project = write_project(tmp_path / "project")
    tag = podman_tags(f"localhost/ckit-test/envcheck:{uuid.uuid4().hex[:12]}")
    prepared = builder.prepare("envcheck", tag=tag, recipes_dirs=[project])
    builder.execute(prepared.plan, prepared.engine, prepared.context, lambda event: None, cached=prepared.cached)
    client = docker.from_env()

    status, output = run_container(client, tag, ["-c", PROBE], entrypoint=["/bin/sh"])
    assert (status, output.decode()) == (0, EXPECTED)  # Docker's meaning: the reference

    converted = convert(f"docker-daemon:{tag}", "sif", compress="gzip", store=Store(tmp_path / "store")).path
    ran = apptainer("exec", "--cleanenv", str(converted), "/bin/sh", "-c", PROBE)
    assert (ran.returncode, ran.stdout) == (0, EXPECTED), ran.stderr

    # the .def, built by singularity from the same Debian base on the test registry (reached as localhost:PORT,
    # over plain http)
    repo = unique_repo("ckit-env-base")
    base = podman_tags(f"{registry.host}/{repo}/debian:bookworm")
    client.images.get(debian_image).tag(base.rsplit(":", 1)[0], "bookworm")
    for item in client.api.push(base.rsplit(":", 1)[0], "bookworm", stream=True, decode=True):
        assert "error" not in item, item
    env = {"CKIT_CACHE_DIR": str(tmp_path / "cache"), "PATH": f"{apptainer.bin_dir}:{os.environ['PATH']}"}
    port = registry.host.split(":")[1]
    built = ckit("--recipes", str(project), "build", "envcheck", "--engine", "apptainer", "--set",
                 f"debian.registry=localhost:{port}/{repo}", "-o", str(tmp_path / "built"), "--json", env=env)
    assert built.returncode == 0, built.stderr
    (artifact,) = json.loads(built.stdout)["artifacts"]
    ran = apptainer("exec", "--cleanenv", artifact["path"], "/bin/sh", "-c", PROBE)
    assert (ran.returncode, ran.stdout) == (0, EXPECTED), ran.stderr
