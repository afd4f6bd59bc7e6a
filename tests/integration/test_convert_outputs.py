"""Outputs where the line points: ``-o DIR/`` (or an existing folder) is a folder, made when missing; ``--to
sif,sqsh`` writes both into it; a repeated convert into the folder finds its own file there, never a second one.
Each artifact is read back as what it claims to be (a SIF header, a squashfs superblock)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.integration.adversary import Ran, run
from tests.integration.hostile_images import END, member, oci_layout

LAYER = member("bin/", kind=b"5", mode=0o755) + member("bin/data", os.urandom(64 << 10)) + END


def convert(tmp_path: Path, *args: str) -> Ran:
    return run("convert", *args, env={"CKIT_CACHE_DIR": str(tmp_path / "cache")}, cwd=tmp_path, timeout=120)


def magic(path: Path) -> bytes:
    with path.open("rb") as file:
        head = file.read(4096)
    return b"SIF" if b"SIF_MAGIC" in head[:64] else head[:4]


def test_a_trailing_slash_names_a_folder_made_when_missing(tmp_path: Path) -> None:
    image = oci_layout(tmp_path / "layout", [LAYER], compress=False)
    first = convert(tmp_path, image, "--to", "sqsh", "-o", "outdir/")
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "outdir").is_dir()
    files = sorted((tmp_path / "outdir").iterdir())
    assert [f.suffix for f in files] == [".sqsh"] and magic(files[0]) == b"hsqs"
    again = convert(tmp_path, image, "--to", "sqsh", "-o", "outdir/")  # its own file: found, not replaced twice
    assert again.returncode == 0, again.stderr
    assert sorted((tmp_path / "outdir").iterdir()) == files
    nested = convert(tmp_path, image, "--to", "sqsh", "-o", "a/b/")
    assert nested.returncode == 0, nested.stderr
    assert [f.suffix for f in (tmp_path / "a" / "b").iterdir()] == [".sqsh"]


def test_both_formats_in_one_line(tmp_path: Path) -> None:
    image = oci_layout(tmp_path / "layout", [LAYER], compress=False)
    done = convert(tmp_path, image, "--to", "sif,sqsh", "-o", "images", "--json")
    assert done.returncode == 0, done.stderr
    artifacts = json.loads(done.stdout)["artifacts"]
    assert sorted(a["target"] for a in artifacts) == ["sif", "sqsh"]
    paths = [Path(a["path"]) for a in artifacts]
    assert all((tmp_path / p).parent == tmp_path / "images" for p in paths)
    assert sorted(magic(tmp_path / p) for p in paths) == [b"SIF", b"hsqs"]


def test_two_formats_into_a_file_are_refused_before_any_work(tmp_path: Path) -> None:
    image = oci_layout(tmp_path / "layout", [LAYER], compress=False)
    (tmp_path / "taken").write_text("mine")
    refused = convert(tmp_path, image, "--to", "sif,sqsh", "-o", "taken")
    assert refused.returncode == 2 and "is a file, not a folder" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and (tmp_path / "taken").read_text() == "mine"
    under = convert(tmp_path, image, "--to", "sqsh", "-o", "taken/x/")
    assert under.returncode == 2 and "cannot make the folder" in under.stderr, under.stderr
