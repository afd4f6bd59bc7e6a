"""Arguments reach the program verbatim through every runtime: ``$(…)``, quotes, spaces, globs (Charliecloud's
``ch-run`` too: its ``--`` hands them to the program as they are).

Singularity is the real Apptainer (tests/infra/apptainer.py, as `singularity`) running a SIF ``ckit convert`` wrote;
the job scripts are written and submitted by ``ckit launch`` on the real Slurm. ``singularity run`` would hand
the arguments to the runscript, which evaluates them (apptainer's semantics): the last tests show that is what
ckit's launch no longer does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.launch.words import literal

ARGS = ("$(touch pwned)", 'say "hi"', " two  spaces ", "`touch pwned2`", "*", "it's", "${HOME}")
SITE = """name: lab
description: a test site with singularity on the local Slurm
scheduler: slurm
partitions: {debug: {gpus_per_node: 0, cpus_per_node: 2}}
default_partition: debug
runtimes: [{kind: singularity, version: 3.4.2}, {kind: none}]
mpi_plugin: pmi2
shared_image_dir: null
compute_internet: true
"""


@pytest.fixture(scope="module")
def busybox_sif(podman, busybox_image, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """busybox as a SIF written by ``ckit convert`` (its defaults)."""
    sif = tmp_path_factory.mktemp("sif") / "busybox.sif"
    assert main(["-q", "convert", f"docker-daemon:{busybox_image}", "--to", "sif", "-o", str(sif)]) == 0
    return sif


@pytest.fixture
def lab(apptainer, tmp_path, monkeypatch) -> Path:  # type: ignore[no-untyped-def]
    """The lab site, and the real singularity on PATH (the jobs inherit it)."""
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "lab.yaml").write_text(SITE)
    monkeypatch.setenv("PATH", f"{apptainer.bin_dir}:/usr/bin:/bin:/usr/sbin:/sbin")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _printed(text: str) -> list[list[str]]:
    return [json.loads(m) for m in re.findall(r"^ARGS(\[.*\])$", text, re.M)]


@pytest.mark.parametrize("framework", ["none", "horovod", "nccl-tests", "ddp", "tf"])
def test_singularity_jobs_pass_arguments_verbatim(slurm, busybox_sif, lab, capsys, framework):
    capsys.readouterr()
    rc = main(["--sites", str(lab / "sites"), "launch", "--site", "lab", "--image", str(busybox_sif), "-J", "vb",
               "--framework", framework, "--submit", "--wait", "--json", "--",
               "printf", "ARGS[%s]\\n", literal(json.dumps(list(ARGS))[1:-1])])
    data = json.loads(capsys.readouterr().out)
    text = Path(data["output"]).read_text()
    assert rc == 0, text
    assert "singularity exec " in Path(data["script"]).read_text()
    assert _printed(text) and all(p == list(ARGS) for p in _printed(text)), text
    assert not list(lab.glob("pwned*"))


@pytest.mark.parametrize("runtime", ["none", "podman", "charliecloud"])
def test_none_podman_and_charliecloud_pass_arguments_verbatim(slurm, podman, busybox_image, tmp_path, monkeypatch,
                                                              capsys, request, runtime):
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    image = {"podman": ["--image", busybox_image]}.get(runtime, [])
    if runtime == "charliecloud":
        image = ["--image", str(request.getfixturevalue("busybox_sqsh"))]
    rc = main(["launch", "--site", "local", "--runtime", runtime, *image, "-J", "vb", "--framework", "ddp",
               "--submit", "--wait", "--json", "--", "printf", "ARGS[%s]\\n", literal(json.dumps(list(ARGS))[1:-1])])
    data = json.loads(capsys.readouterr().out)
    text = Path(data["output"]).read_text()
    assert rc == 0 and _printed(text) == [list(ARGS)], text
    assert not list(tmp_path.glob("pwned*"))


def test_the_runscript_would_have_evaluated_them(apptainer, busybox_sif, tmp_path):
    """What `singularity run` did before: the SIF's runscript evaluates its arguments (apptainer's semantics)."""
    def action(name: str) -> str:
        return apptainer(name, str(busybox_sif), "printf", "%s|", "$(echo EVALUATED)", cwd=tmp_path).stdout

    assert action("run") == "EVALUATED|"
    assert action("exec") == "$(echo EVALUATED)|"


def test_a_zstd_sif_is_refused_for_a_site_that_mounts_gzip_only(busybox_image, tmp_path, monkeypatch, capsys):
    """twnia2's CentOS 7 kernel mounts gzip/xz, and its Singularity reads no zstd: launch reads the superblock."""
    monkeypatch.chdir(tmp_path)
    assert main(["-q", "convert", f"docker-daemon:{busybox_image}", "--to", "sif", "--compress", "zstd",
                 "-o", "zstd.sif"]) == 0
    capsys.readouterr()
    assert main(["launch", "--site", "twnia2", "-A", "P1", "--image", "zstd.sif", "--dry-run", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "is zstd-compressed; twnia2's kernel mounts only gzip, xz, lzo" in err and "--site twnia2" in err
    assert "its singularity 3.x reads no zstd squashfs in a .sif" in err
