"""Arguments reach the program verbatim through every runtime: ``$(…)``, quotes, spaces, globs (Charliecloud's
``ch-run`` too: its ``--`` hands them to the program as they are).

singularity/apptainer are not packaged for Debian 12, so a stand-in ``singularity`` runs what the real one runs:
the SIF's own ``/.singularity.d/actions/ACTION`` script, in a chroot of the SIF's squashfs (ckit wrote the SIF;
unsquashfs unpacked it). The job scripts are written and submitted by ``ckit launch`` on the real Slurm.
``singularity run`` would hand the arguments to the runscript, which evaluates them (apptainer's semantics): the
last test shows that is what ckit's launch no longer does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.image.sif import read_sif
from buildkit.process import require, run

ARGS = ("$(touch pwned)", 'say "hi"', " two  spaces ", "`touch pwned2`", "*", "it's", "${HOME}")
SHIM = """#!/bin/bash
# singularity/apptainer stand-in: the SIF's own action script in a chroot of its unpacked squashfs
set -euo pipefail
action=$1; shift
while [[ $1 == --* ]]; do case $1 in --bind|--pwd) shift 2;; *) shift;; esac; done
image=$1; shift
exec chroot "${CKIT_TEST_SIF_ROOT}" "/.singularity.d/actions/${action}" "$@"
"""
SITE = """name: lab
description: a test site with singularity on the local Slurm
scheduler: slurm
partitions: {debug: {gpus_per_node: 0, cpus_per_node: 2}}
default_partition: debug
runtimes: [{kind: singularity}, {kind: none}]
mpi_plugin: pmi2
shared_image_dir: null
compute_internet: true
"""


@pytest.fixture(scope="module")
def sif_root(podman, busybox_image, tmp_path_factory) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """busybox as a SIF written by ckit, and its squashfs unpacked (what singularity mounts)."""
    work = tmp_path_factory.mktemp("sif")
    sif = work / "busybox.sif"
    assert main(["-q", "convert", f"docker-daemon:{busybox_image}", "--to", "sif", "-o", str(sif)]) == 0
    offset = read_sif(sif).primary_partition().offset  # type: ignore[union-attr]
    run(["unsquashfs", "-q", "-o", str(offset), "-d", str(work / "root"), str(sif)])
    return sif, work / "root"


@pytest.fixture
def lab(sif_root, tmp_path, monkeypatch) -> Path:  # type: ignore[no-untyped-def]
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "lab.yaml").write_text(SITE)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "singularity").write_text(SHIM)
    (tmp_path / "bin" / "singularity").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{Path('/usr/bin')}:{Path('/bin')}:/usr/sbin:/sbin")
    monkeypatch.setenv("CKIT_TEST_SIF_ROOT", str(sif_root[1]))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _printed(text: str) -> list[list[str]]:
    return [json.loads(m) for m in re.findall(r"^ARGS(\[.*\])$", text, re.M)]


@pytest.mark.parametrize("framework", ["none", "horovod", "nccl-tests", "ddp", "tf"])
def test_singularity_jobs_pass_arguments_verbatim(slurm, sif_root, lab, capsys, framework):
    capsys.readouterr()
    rc = main(["--sites", str(lab / "sites"), "launch", "--site", "lab", "--image", str(sif_root[0]), "-J", "vb",
               "--framework", framework, "--submit", "--wait", "--json", "--",
               "printf", "ARGS[%s]\\n", json.dumps(list(ARGS))[1:-1]])
    data = json.loads(capsys.readouterr().out)
    text = Path(data["output"]).read_text()
    assert rc == 0, text
    assert "singularity exec " in Path(data["script"]).read_text()
    assert _printed(text) and all(p == list(ARGS) for p in _printed(text)), text
    assert not list(lab.glob("pwned*")) and not list(sif_root[1].glob("pwned*"))


@pytest.mark.parametrize("runtime", ["none", "podman", "charliecloud"])
def test_none_podman_and_charliecloud_pass_arguments_verbatim(slurm, podman, busybox_image, tmp_path, monkeypatch,
                                                              capsys, request, runtime):
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    image = {"podman": ["--image", busybox_image]}.get(runtime, [])
    if runtime == "charliecloud":
        image = ["--image", str(request.getfixturevalue("busybox_sqsh"))]
    rc = main(["launch", "--site", "local", "--runtime", runtime, *image, "-J", "vb", "--framework", "ddp",
               "--submit", "--wait", "--json", "--", "printf", "ARGS[%s]\\n", json.dumps(list(ARGS))[1:-1]])
    data = json.loads(capsys.readouterr().out)
    text = Path(data["output"]).read_text()
    assert rc == 0 and _printed(text) == [list(ARGS)], text
    assert not list(tmp_path.glob("pwned*"))


def test_the_runscript_would_have_evaluated_them(sif_root, tmp_path):
    """What `singularity run` did before: the SIF's runscript evaluates its arguments (apptainer's semantics)."""
    root = sif_root[1]
    chroot = require("chroot", purpose="run the SIF's scripts", package="coreutils")
    def action(name: str) -> str:
        return run([chroot, str(root), f"/.singularity.d/actions/{name}", "printf", "%s|", "$(echo EVALUATED)"],
                   env={"PATH": "/bin"}).stdout

    assert action("run") == "EVALUATED|"
    assert action("exec") == "$(echo EVALUATED)|"


def test_a_zstd_sif_is_refused_for_a_site_that_mounts_gzip_only(sif_root, tmp_path, monkeypatch, capsys):
    """ckit's .sif is zstd by default; twnia2's CentOS 7 kernel mounts gzip/xz: launch reads the superblock."""
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["launch", "--site", "twnia2", "-A", "P1", "--image", str(sif_root[0]), "--dry-run", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "is zstd-compressed; twnia2's kernel mounts only gzip, xz, lzo" in err and "--site twnia2" in err
