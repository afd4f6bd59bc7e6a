"""Outputs: ckit replaces only a regular file that is not its input, and a file system that is full or read-only
is one clear error with nothing left behind.

Device nodes, FIFOs, folders, paths under a file, names too long, the input itself (also through a hard or
symbolic link) are refused before any work (exit 2) by every command that writes a file a user names: convert,
render, launch, stage, pull. Real small file systems (a 1 MiB tmpfs, a read-only tmpfs) stand for a full disk and
a read-only share, for outputs and for the cache; a lock file replaced by a folder is one line, not a traceback.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.adversary import Ran, clean_failure, no_leftovers, run
from tests.integration.hostile_images import END, member, oci_layout
from tests.integration.registry_helpers import fake_sif

LAYER = member("bin/", kind=b"5", mode=0o755) + member("bin/data", os.urandom(3 << 20)) + END  # 3 MiB, incompressible


@pytest.fixture
def image(tmp_path: Path) -> str:
    return oci_layout(tmp_path / "layout", [LAYER], compress=False)


def convert(tmp_path: Path, source: str, output: Path, **env: str) -> Ran:
    return run("convert", source, "--to", "sqsh", "-o", str(output),
               env={"CKIT_CACHE_DIR": str(tmp_path / "cache"), **env}, timeout=120)


def char_device(path: Path) -> Path:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers, in the test's folder
    return path


@contextmanager
def tmpfs(where: Path, *options: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=1m", *options)), "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


# --- what is at the output path ---------------------------------------------------------------------------------
def test_the_longest_legal_output_name_works(tmp_path: Path, image: str) -> None:
    ran = convert(tmp_path, image, tmp_path / ("n" * 250 + ".sqsh"))  # 255 bytes: its temp name must fit too
    assert ran.returncode == 0, ran.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("n")] == ["n" * 250 + ".sqsh"]


@pytest.mark.parametrize("kind", ["device", "symlink-to-device", "fifo", "under-a-file", "too-long"])
def test_convert_refuses_an_output_it_may_not_replace(tmp_path: Path, image: str, kind: str) -> None:
    target = tmp_path / "out.sqsh"
    says = {"device": "is a character device", "symlink-to-device": "is a character device", "fifo": "is a FIFO",
            "under-a-file": "is a file, not a folder",
            "too-long": "too long"}[kind]
    if kind == "device":
        char_device(target)
    elif kind == "symlink-to-device":
        target.symlink_to(char_device(tmp_path / "null"))
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "under-a-file":
        (tmp_path / "file").write_text("x")
        target = tmp_path / "file" / "out.sqsh"
    else:
        target = tmp_path / ("n" * 300 + ".sqsh")
    before = os.lstat(target) if os.path.lexists(target) else None
    ran = convert(tmp_path, image, target)
    clean_failure(ran, 2, says=says)
    assert ran.seconds < 20 and not (tmp_path / "cache" / "artifacts").exists()  # refused before any work
    if before is not None:
        after = os.lstat(target)
        assert (stat.S_IFMT(after.st_mode), after.st_ino) == (stat.S_IFMT(before.st_mode), before.st_ino)
    assert stat.S_ISCHR(os.stat(tmp_path / "null").st_mode) if kind == "symlink-to-device" else True


@pytest.mark.parametrize("how", ["same-path", "hard-link", "symbolic-link"])
def test_convert_never_overwrites_its_input(tmp_path: Path, how: str) -> None:
    from tests.integration.hostile_images import docker_archive

    archive = tmp_path / "image.tar"
    source = docker_archive(archive, [LAYER])
    original = archive.read_bytes()
    target = {"same-path": archive, "hard-link": tmp_path / "linked.tar",
              "symbolic-link": tmp_path / "sym.tar"}[how]
    if how == "hard-link":
        os.link(archive, target)
    elif how == "symbolic-link":
        target.symlink_to(archive)
    ran = convert(tmp_path, source, target)
    clean_failure(ran, 2, says="does not overwrite its input")
    assert archive.read_bytes() == original


def test_convert_never_overwrites_a_file_of_an_oci_layout_it_reads(tmp_path: Path, image: str) -> None:
    index = tmp_path / "layout" / "index.json"
    before = index.read_bytes()
    clean_failure(convert(tmp_path, image, index), 2, says="part of the input")
    assert index.read_bytes() == before


def test_render_launch_stage_and_pull_refuse_devices_and_their_inputs(tmp_path: Path) -> None:
    null = char_device(tmp_path / "null")
    render = ["render", "pytorch-ddp", "--format", "docker", "-o"]  # a stack whose Dockerfile is one file
    clean_failure(run(*render, str(null)), 2, says="is a character device")
    sif = fake_sif(tmp_path / "app.sif")
    original = sif.read_bytes()
    launch = ["launch", "--site", "tara", "--account", "proj0001", "--image", str(sif), "--", "true"]
    for output, says in ((null, "is a character device"), (sif, "does not overwrite its input")):
        clean_failure(run(*launch[:-2], "--script", str(output), "--no-submit", *launch[-2:], cwd=tmp_path), 2, says=says)
    assert sif.read_bytes() == original and stat.S_ISCHR(os.stat(null).st_mode)
    staged = run("stage", str(sif), "--dest", str(tmp_path),  # its own folder: the copy goes to the stager's tree
                 env={"CKIT_CACHE_DIR": str(tmp_path / "c")})
    assert staged.returncode == 0, staged.stderr
    assert sif.read_bytes() == original
    assert (tmp_path / f"u{os.geteuid()}" / "files" / "app.sif").read_bytes() == original


# --- full and read-only file systems -----------------------------------------------------------------------------
def test_a_full_output_file_system_is_one_error_and_leaves_nothing(tmp_path: Path, image: str) -> None:
    with tmpfs(tmp_path / "small") as small:
        ran = convert(tmp_path, image, small / "out.sqsh")
        clean_failure(ran, 1, says="No space left on device")
        assert list(small.iterdir()) == []


def test_a_full_cache_is_one_error_and_leaves_no_temporary_file(tmp_path: Path, image: str) -> None:
    with tmpfs(tmp_path / "cache") as cache:
        ran = convert(tmp_path, image, tmp_path / "out.sqsh", CKIT_CACHE_DIR=str(cache))
        clean_failure(ran, 1, says="No space left on device")
        assert no_leftovers(cache / "artifacts") == [] and not list((cache / "artifacts").glob("*.sqsh"))
    assert not (tmp_path / "out.sqsh").exists()


def test_a_read_only_output_folder_is_refused_before_any_work(tmp_path: Path, image: str) -> None:
    with tmpfs(tmp_path / "ro", "ro") as ro:
        ran = convert(tmp_path, image, ro / "out.sqsh")
        clean_failure(ran, 2, says="read-only file system")
        assert not (tmp_path / "cache" / "artifacts").exists()


def test_a_read_only_cache_is_one_error(tmp_path: Path, image: str) -> None:
    with tmpfs(tmp_path / "cache", "ro") as cache:
        ran = convert(tmp_path, image, tmp_path / "out.sqsh", CKIT_CACHE_DIR=str(cache))
        clean_failure(ran, 1, says="Read-only file system")


def test_a_lock_file_replaced_by_a_folder_is_one_error(tmp_path: Path, image: str) -> None:
    first = convert(tmp_path, image, tmp_path / "one.sqsh")
    assert first.returncode == 0, first.stderr
    for artifact in (tmp_path / "cache" / "artifacts").glob("*.sqsh"):
        (tmp_path / "cache" / "locks" / f"{artifact.name.split('.')[0]}.lease").mkdir()
        artifact.unlink()
    ran = convert(tmp_path, image, tmp_path / "two.sqsh", CKIT_LOCK_STALE_SECONDS="2")
    clean_failure(ran, 1, says="is not a lease file but a folder")
