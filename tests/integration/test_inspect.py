"""``ckit inspect`` on real SIFs (apptainer/singularity/sylabs), on ckit's own SIF and on an Enroot squashfs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from buildkit import process
from buildkit.cli import main
from buildkit.image.model import ImageConfig
from buildkit.image.rootfs import apptainer as A
from buildkit.image.rootfs import charliecloud as C
from buildkit.image.rootfs import enroot as E
from buildkit.image.sif.write import write_apptainer_sif
from tests.integration.rootfs_helpers import materialize
from tests.testdata import sif_dir

pytestmark = pytest.mark.integration
DATA = sif_dir()
CONFIG = ImageConfig(entrypoint=("/bin/entry",), cmd=("--serve", "it's"), env=("PATH=/usr/bin:/bin", "LANG=C.UTF-8"),
                     labels=(("org.opencontainers.image.title", "demo"),), working_dir="/srv", volumes=("/data",),
                     raw={"Entrypoint": ["/bin/entry"], "Cmd": ["--serve", "it's"]})
DEFFILE = "bootstrap: docker\nfrom: localhost/demo:1\n\n"


def ckit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def squash(tree: Path, out: Path) -> Path:
    process.run(["mksquashfs", tree, out, "-noappend", "-comp", "gzip", "-all-root", "-mkfs-time", "0",
                 "-all-time", "0", "-no-progress", "-quiet"])
    return out


@pytest.fixture
def ckit_sif(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    materialize(tree, A.entries(CONFIG, deffile=DEFFILE, source_date_epoch=0))
    root = squash(tree, tmp_path / "root.sqsh")
    sif = tmp_path / "image.sif"
    write_apptainer_sif(sif, deffile=DEFFILE.encode(), oci_config=A.oci_config_json(CONFIG), squashfs=root,
                        arch="amd64", source_date_epoch=0)
    monkeypatch.chdir(tmp_path)
    return sif


@pytest.fixture
def enroot_sqsh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    materialize(tree, [*E.entries(CONFIG, provenance="docker://localhost#demo:1"), *C.entries(CONFIG)])
    monkeypatch.chdir(tmp_path)
    return squash(tree, tmp_path / "image.sqsh")


def test_inspect_ckit_sif_text(ckit_sif: Path, capsys: pytest.CaptureFixture[str],
                               golden: Callable[[str, str], None]) -> None:
    code, out, err = ckit(capsys, "inspect", ckit_sif.name)
    assert (code, err) == (0, "")
    golden("inspect/ckit-sif.txt", out)


def test_inspect_ckit_sif_json(ckit_sif: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = ckit(capsys, "inspect", "--json", str(ckit_sif))
    report = json.loads(out)
    assert (code, report["format"], report["deffile"]) == (0, "sif", DEFFILE)
    assert report["oci_config"] == {"Cmd": ["--serve", "it's"], "Entrypoint": ["/bin/entry"]}
    assert [d["type"] for d in report["descriptors"]] == ["Def.FILE", "JSON.Generic", "FS"]
    assert report["partition"]["superblock"]["compression"] == "gzip"
    assert report["partition"]["offset"] % 4096 == 0
    assert report["labels"]["org.opencontainers.image.title"] == "demo"
    assert report["runscript"] == A.runscript(CONFIG)
    env = report["environment"]
    assert env["/.singularity.d/env/10-docker2singularity.sh"] == A.docker_env_script(CONFIG)
    assert env["/.singularity.d/env/94-appsbase.sh"] == ""
    assert len(env) == 7


def test_inspect_enroot_sqsh(enroot_sqsh: Path, capsys: pytest.CaptureFixture[str],
                             golden: Callable[[str, str], None]) -> None:
    code, out, _ = ckit(capsys, "inspect", enroot_sqsh.name)
    assert code == 0
    golden("inspect/enroot-sqsh.txt", out)
    code, out, _ = ckit(capsys, "inspect", "--json", enroot_sqsh.name)
    report = json.loads(out)
    assert report["files"] == {"/etc/rc": E.rc_text(CONFIG, provenance="docker://localhost#demo:1"),
                               "/etc/rc.local": E.RC_LOCAL.decode(), "/etc/environment": "PATH=/usr/bin:/bin\n"
                               "LANG=C.UTF-8\n", "/etc/fstab": E.fstab_text(CONFIG),
                               "/ch/environment": "LANG=C.UTF-8\nPATH=/usr/bin:/bin\n",
                               "/ch/metadata.json": C.metadata_text(CONFIG)}
    assert report["superblock"]["created"] == "1970-01-01T00:00:00Z"
    assert any(line.startswith("Compression gzip") for line in report["unsquashfs"])


@pytest.mark.parametrize(("name", "arch"), [("busybox_amd64.sif", "amd64"), ("busybox_arm64.sif", "arm64"),
                                            ("busybox_ppc64le.sif", "ppc64le")])
def test_inspect_real_signed_singularity_sifs(name: str, arch: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = ckit(capsys, "inspect", "--json", str(DATA / name))
    report = json.loads(out)
    assert code == 0 and report["header"]["arch"] == arch and report["header"]["data_offset"] == 32768
    assert report["descriptors"][-1]["signature"]["hashtype"] == "SHA-256"
    assert report["labels"]["org.label-schema.usage.singularity.deffile.from"] == "busybox:1.33.1"
    assert report["oci_config"]["Cmd"] == ["sh"]
    assert report["runscript"].startswith("#!/bin/sh\nOCI_ENTRYPOINT=''\nOCI_CMD='\"sh\"'\n")
    assert "export PATH=" in report["environment"]["/.singularity.d/env/10-docker2singularity.sh"]
    code, out, _ = ckit(capsys, "inspect", str(DATA / name))
    assert code == 0 and "FS (Squashfs/*System/" + arch + ")" in out and "Signature (SHA-256)" in out


def test_inspect_sylabs_images_without_rootfs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = ckit(capsys, "inspect", str(DATA / "sylabs" / "one-object-sbom.sif"))
    assert code == 0 and "SBOM (cyclonedx-json)" in out and "Primary partition: none (apptainer cannot run" in out
    code, out, _ = ckit(capsys, "inspect", "--json", str(DATA / "sylabs" / "two-groups-signed-dsse.sif"))
    report = json.loads(out)
    assert code == 0 and [d["type"] for d in report["descriptors"]][-2:] == ["Signature", "Signature"]
    assert report["partition"]["fstype"] == "Squashfs"
    assert (report["labels"], report["runscript"], report["environment"]) == (None, None, {})  # a bare test squashfs


def test_inspect_rejects_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello\n" * 1000)
    code, out, err = ckit(capsys, "inspect", str(other))
    assert (code, out) == (2, "")
    assert f"{other}: neither a SIF image nor a squashfs" in err
    code, _, err = ckit(capsys, "inspect", "--json", str(tmp_path / "missing.sif"))
    assert code == 2 and "missing.sif: cannot read" in err
    bad = tmp_path / "bad.sif"
    raw = bytearray((DATA / "sylabs" / "one-group.sif").read_bytes())
    raw[42:44] = b"09"
    bad.write_bytes(bytes(raw))
    code, _, err = ckit(capsys, "inspect", str(bad))
    assert code == 1 and "bad.sif: unsupported SIF version '09'" in err
    assert os.path.exists(bad)
