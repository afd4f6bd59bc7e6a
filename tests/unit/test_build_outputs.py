"""ckit build -o DIR keeps one build per stack and format: an earlier fingerprint's file is removed and said."""

from __future__ import annotations

import os
from pathlib import Path

from buildkit.api._outputs import drop_older_builds, output_folder


def test_a_new_build_replaces_the_earlier_one_of_its_stack_and_format(tmp_path):
    names = ["demo-0123456789ab.sif", "demo-0123456789ab.sqsh", "demo-aaaaaaaaaaaa-locked.sif",
             "demo-extra-0123456789ab.sif", "demo-0123456789ab.sif.bak", "notes.txt", "demo-xyz.sif"]
    for name in names:
        (tmp_path / name).write_bytes(b"x" * 10)
    os.symlink(tmp_path / "notes.txt", tmp_path / "demo-bbbbbbbbbbbb.sif")  # a link of the user's: not ckit's file
    new = tmp_path / "demo-ffffffffffff.sif"
    new.write_bytes(b"new")
    said: list[str] = []
    dropped = drop_older_builds("demo", [new], said.append)
    assert dropped == {new: [str(tmp_path / "demo-0123456789ab.sif")]}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*names[1:], "demo-bbbbbbbbbbbb.sif", "demo-ffffffffffff.sif"])
    assert len(said) == 1 and "removed the earlier build" in said[0] and "demo-ffffffffffff.sif replaces it" in said[0]


def test_a_locked_build_replaces_only_locked_ones(tmp_path):
    (tmp_path / "demo-0123456789ab.sqsh").write_bytes(b"x")
    (tmp_path / "demo-0123456789ab-locked.sqsh").write_bytes(b"x")
    new = tmp_path / "demo-ffffffffffff-locked.sqsh"
    new.write_bytes(b"y")
    drop_older_builds("demo", [new], lambda message: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-0123456789ab.sqsh", "demo-ffffffffffff-locked.sqsh"]


def test_an_output_folder_is_one_with_a_slash_or_that_exists(tmp_path):
    assert output_folder(None) is None and output_folder(str(tmp_path / "f.sif")) is None
    assert output_folder(str(tmp_path / "a" / "b") + "/") == tmp_path / "a" / "b" and (tmp_path / "a" / "b").is_dir()
    assert output_folder(Path(tmp_path / "a")) == tmp_path / "a"
    assert output_folder(str(tmp_path / "c"), several=True) == tmp_path / "c" and (tmp_path / "c").is_dir()
