"""Seed 004 (tara: compute nodes without internet): stage on the login node, then `ckit launch` finds what was
staged, for a registry image and for a stack; the staged files are in the site's format and compression, and for a
Pyxis site they are what the importer serves."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from buildkit.image.sif.read import read_sif
from buildkit.image.squashfs.superblock import check
from tests.integration.pyxis_helpers import importer, pyxis_env
from tests.integration.registry_helpers import ckit, unique_repo

SITES = Path(__file__).resolve().parents[2] / "sites"


def site_copy(tmp_path: Path, name: str, base: str) -> tuple[Path, Path]:
    """A user site profile: the built-in ``base`` with its shared image folder in ``tmp_path``."""
    profile = yaml.safe_load((SITES / f"{base}.yaml").read_text())
    profile["name"] = name
    profile["shared_image_dir"] = str(tmp_path / "shared" / "$USER")
    sites = tmp_path / "sites"
    sites.mkdir(exist_ok=True)
    (sites / f"{name}.yaml").write_text(yaml.safe_dump(profile))
    return sites, tmp_path / "shared" / "alice"


def push_busybox(registry: Any, image: str) -> str:
    ref = f"{registry.host}/{unique_repo('stage')}:1"
    done = subprocess.run(["skopeo", "copy", "-q", "--dest-tls-verify=false", f"containers-storage:{image}",  # noqa: S607
                           f"docker://{ref}"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return ref


def sif_compression(path: Path) -> str:
    part = read_sif(path).primary_partition()
    assert part is not None
    return check(path, part.offset).compression


def image_line(script: str) -> str:
    return re.search(r"^export CKIT_IMAGE=(.*)$", script, re.M).group(1)  # type: ignore[union-attr]


def test_seed004_stage_on_the_login_node_then_launch_runs_it(registry, busybox_image: str, tmp_path: Path) -> None:
    sites, shared = site_copy(tmp_path, "taratest", "tara")
    env = {"USER": "alice", "CKIT_SITES_PATH": str(sites)}
    ref = push_busybox(registry, busybox_image)
    launch = ("launch", "--site", "taratest", "--account", "proj0001", "--dry-run", "--image")
    refused = ckit(*launch, ref, "--", "python", "mnist.py", env=env)
    assert refused.returncode == 2
    hinted = re.search(r"`(ckit stage [^`]+)`", refused.stderr)
    assert hinted and hinted.group(1) == f"ckit stage {ref} --site taratest"
    staged = ckit(*hinted.group(1).split()[1:], "--json", env=env)  # exactly what the hint says
    assert staged.returncode == 0, staged.stderr
    result = json.loads(staged.stdout)
    path = Path(result["path"])
    assert path.parent == shared / f"u{os.geteuid()}" / "artifacts" and path.suffix == ".sif"
    assert (result["target"], result["compression"]) == ("sif", "gzip:1")  # what tara's kernel mounts
    assert sif_compression(path) == "gzip"
    listing = subprocess.run(["siftool", "list", str(path)], capture_output=True, text=True, check=True).stdout  # noqa: S607
    assert "Squashfs" in listing
    for image in (ref, f"{ref.rsplit(':', 1)[0]}@{result['digest']}"):
        ran = ckit(*launch, image, "--", "python", "mnist.py", env=env)
        assert ran.returncode == 0, ran.stderr
        assert image_line(ran.stdout) == str(path)
    again = ckit("stage", ref, "--site", "taratest", "--json", env=env)
    assert json.loads(again.stdout)["converted"] is False  # staged once


def test_a_stack_is_staged_and_found_by_its_name(debian_image: str, tmp_path: Path) -> None:
    sites, shared = site_copy(tmp_path, "taratest", "tara")
    env = {"USER": "alice", "CKIT_SITES_PATH": str(sites), "CKIT_CACHE_DIR": str(tmp_path / "cache")}
    launch = ("launch", "--site", "taratest", "--account", "proj0001", "--dry-run", "--image", "demo", "--", "true")
    missing = ckit(*launch, env=env)
    assert missing.returncode == 2
    assert f"nothing is staged for stack demo (.sif for singularity) in {shared}" in missing.stderr
    built = ckit("build", "demo", "--json", env=env)
    assert built.returncode == 0, built.stderr
    staged = ckit("stage", "demo", "--site", "taratest", "--json", env=env)
    assert staged.returncode == 0, staged.stderr
    path = Path(json.loads(staged.stdout)["path"])
    assert json.loads(staged.stdout)["kind"] == "stack" and sif_compression(path) == "gzip"
    ran = ckit(*launch, env=env)
    assert ran.returncode == 0, ran.stderr
    assert image_line(ran.stdout) == str(path)


def test_what_is_staged_for_a_pyxis_site_is_what_the_importer_serves(registry, busybox_image: str,
                                                                    tmp_path: Path) -> None:
    sites, shared = site_copy(tmp_path, "ocitest", "oci")
    ref = push_busybox(registry, busybox_image)
    staged = ckit("stage", ref, "--site", "ocitest", "--json", env={"USER": "alice", "CKIT_SITES_PATH": str(sites)})
    assert staged.returncode == 0, staged.stderr
    path = json.loads(staged.stdout)["path"]
    assert path.endswith(".sqsh") and Path(path).parent == shared / f"u{os.geteuid()}" / "artifacts"
    home = tmp_path / "home"
    home.mkdir()
    env = pyxis_env(home, shared, extra={"CKIT_SITES_PATH": str(sites), "USER": "alice"})
    Path(env["CKIT_IMPORTER_CONFIG"]).write_text("site: ocitest\n")  # the cache is the site's shared folder
    served = importer("get", f"docker://{ref.replace('/', '#', 1)}", env=env)
    assert (served.returncode, served.stdout.strip()) == (0, path), served.stderr
    assert "converting" not in served.stderr
    launched = ckit("launch", "--site", "ocitest", "--dry-run", "--image", ref, "--", "true",
                    env={"USER": "alice", "CKIT_SITES_PATH": str(sites)})
    assert launched.returncode == 0 and image_line(launched.stdout) == path


def test_stage_refuses_files_the_site_cannot_use(registry, busybox_image: str, tmp_path: Path) -> None:
    sites, _shared = site_copy(tmp_path, "taratest", "tara")
    env = {"USER": "alice", "CKIT_SITES_PATH": str(sites), "CKIT_CACHE_DIR": str(tmp_path / "cache")}
    ref = push_busybox(registry, busybox_image)
    for target in ("sif", "sqsh"):  # zstd: a .sqsh by default, a .sif when asked for
        made = ckit("convert", f"docker://{ref}", "--to", target, "--compress", "zstd", "-o",
                    str(tmp_path / f"bb.{target}"), env=env)
        assert made.returncode == 0, made.stderr
    zstd_sif = ckit("stage", str(tmp_path / "bb.sif"), "--site", "taratest", env=env)
    assert zstd_sif.returncode == 2
    assert "is zstd-compressed; taratest's kernel mounts only gzip, xz, lzo" in zstd_sif.stderr
    assert "--site taratest" in zstd_sif.stderr
    sqsh = ckit("stage", str(tmp_path / "bb.sqsh"), "--site", "taratest", env=env)
    assert sqsh.returncode == 2 and "taratest runs .sif files (singularity)" in sqsh.stderr
    plain = ckit("stage", ref, "--dest", str(tmp_path / "d"), env=env)
    assert plain.returncode == 2 and "add --to sif|sqsh, or --site SITE" in plain.stderr


@pytest.mark.parametrize("fmt", ["sif"])
def test_stage_a_local_file_the_site_can_use_copies_it_verified(registry, busybox_image: str, tmp_path: Path,
                                                                fmt: str) -> None:
    sites, shared = site_copy(tmp_path, "taratest", "tara")
    env = {"USER": "alice", "CKIT_SITES_PATH": str(sites), "CKIT_CACHE_DIR": str(tmp_path / "cache")}
    ref = push_busybox(registry, busybox_image)
    made = ckit("convert", f"docker://{ref}", "--to", fmt, "--site", "taratest", "-o", str(tmp_path / f"bb.{fmt}"),
                env=env)
    assert made.returncode == 0, made.stderr
    staged = ckit("stage", str(tmp_path / f"bb.{fmt}"), "--site", "taratest", env=env)
    assert staged.returncode == 0, staged.stderr
    files = shared / f"u{os.geteuid()}" / "files"  # the stager's own tree
    assert staged.stdout.strip() == str(files / f"bb.{fmt}")
    assert (files / f"bb.{fmt}").read_bytes() == (tmp_path / f"bb.{fmt}").read_bytes()


def test_stage_dry_run_says_what_it_would_make_and_touches_nothing(tmp_path: Path) -> None:
    sites, shared = site_copy(tmp_path, "taratest", "tara")
    env = {"USER": "alice", "CKIT_SITES_PATH": str(sites)}
    plan = ckit("stage", "nvcr.io/nvidia/pytorch:24.06-py3", "--site", "taratest", "--dry-run", "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["plan"] == {"source": "nvcr.io/nvidia/pytorch:24.06-py3", "kind": "registry",
                                               "folder": str(shared), "target": "sif", "compression": "gzip:1",
                                               "site": "taratest"}
    text = ckit("stage", "demo", "--site", "taratest", "--to", "sqsh", "--dry-run", env=env)
    assert text.stdout == f"stage demo (stack) into {shared} as .sqsh gzip:1\n"
    assert not shared.exists()
    bad = ckit("stage", "demo", "--site", "taratest", "--compress", "zstd", "--dry-run", env=env)
    assert bad.returncode == 2 and "a zstd .sif does not run on taratest: taratest's kernel mounts" in bad.stderr
