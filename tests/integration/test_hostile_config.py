"""Hostile configuration files: recipes, site profiles, docker's config.json, lock files and SIF headers.

A 350-byte "billion laughs" recipe, a recipe nested 10,000 deep, a recipe or config that is a link to
``/dev/zero`` or a FIFO, a file of many megabytes, a SIF whose definition is -1 bytes long or whose objects lie
outside the file: each is one clear error (exit 1 or 2) in bounded time and memory, read by the real CLI.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from tests.integration.adversary import clean_failure, run

LAUGHS = "kind: stack\ndescription: lol\nbase: debian\nparameters:\n a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f" {b}: &{b} [{','.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True))


def stack_dir(tmp_path: Path, text: str | None = None) -> Path:
    folder = tmp_path / "recipes"
    (folder / "stacks").mkdir(parents=True)
    if text is not None:
        (folder / "stacks" / "mine.yaml").write_text(text)
    return folder


def show(folder: Path) -> tuple:  # type: ignore[type-arg]
    return run("--recipes", str(folder), "show", "mine", timeout=60),


@pytest.mark.parametrize("text, says", [
    (LAUGHS, "expands to more than"),
    ("kind: stack\ndescription: deep\nbase: debian\nparameters: " + "[" * 10_000 + "]" * 10_000 + "\n",
     "nested deeper than 100 levels"),
    ("kind: stack\ndescription: big\nbase: debian\n" + "# " + "x" * (5 << 20) + "\n", "more than the"),
    ("kind: stack\ndescription: key\nbase: debian\n? [a, b]\n: 1\n", "a key must be a plain value"),
])
def test_hostile_recipes_are_one_clear_error_in_bounded_memory(tmp_path: Path, text: str, says: str) -> None:
    assert len(LAUGHS) < 400
    (ran,) = show(stack_dir(tmp_path, text))
    clean_failure(ran, 2, says=says)
    assert ran.seconds < 30


@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_a_recipe_that_is_a_device_or_a_fifo_is_not_read(tmp_path: Path, kind: str) -> None:
    folder = stack_dir(tmp_path)
    path = folder / "stacks" / "mine.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    (ran,) = show(folder)
    clean_failure(ran, 2, says="unknown stack 'mine'")  # only regular files are recipes: never opened
    assert ran.seconds < 30


def test_an_env_name_with_a_newline_in_a_recipe_is_refused(tmp_path: Path) -> None:
    folder = stack_dir(tmp_path, "kind: stack\ndescription: env\nbase: debian\naddons: [env]\n"
                                 "parameters:\n  env: {vars: [\"FOO\\n=x\"]}\n")
    ran = run("--recipes", str(folder), "render", "mine", "--format", "docker")
    clean_failure(ran, 2, says="mine.yaml:6: parameter 'vars' value must be one line at 'parameters.env.vars'")


@pytest.mark.parametrize(("content", "says"), [
    ("/dev/zero", "cannot reach registry 127.0.0.1:1"),  # not a regular file: not read, the pull goes on
    ("[" * 100_000, "config.json: not a readable docker config file"),
    ('{"auths": ["x"]}', "config.json: auths must be a JSON object"),
    ('{"auths": {"h": {"auth": 5}}}', "cannot reach registry 127.0.0.1:1"),  # another host's entry: not used
])
def test_a_hostile_docker_config_is_one_clear_error(tmp_path: Path, content: str, says: str) -> None:
    config = tmp_path / "docker" / "config.json"
    config.parent.mkdir()
    if content == "/dev/zero":
        config.symlink_to(content)
    else:
        config.write_text(content)
    ran = run("pull", "127.0.0.1:1/team/app:1", "-o", str(tmp_path / "out"),
              env={"DOCKER_CONFIG": str(config.parent), "CKIT_CACHE_DIR": str(tmp_path / "c"),
                   "CKIT_REGISTRY_USER": "", "CKIT_REGISTRY_PASSWORD": ""}, timeout=60)
    clean_failure(ran, 1, 2, says=says)


def test_a_lock_file_that_is_a_device_is_not_read(tmp_path: Path) -> None:
    lock = tmp_path / "ckit.lock"
    lock.symlink_to("/dev/zero")
    ran = run("build", "demo", "--locked", "--lock-file", str(lock), "--dry-run", timeout=60)
    clean_failure(ran, 2, says="not a ckit lock file")


# --- SIF headers ----------------------------------------------------------------------------------------------------
DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")


def sif_with(tmp_path: Path, **changes: int) -> Path:
    """A small SIF (one Def.FILE object) with descriptor fields overwritten."""
    from buildkit.image.sif import write as S

    path = tmp_path / "hostile.sif"
    with path.open("wb") as out:
        S.write_sif(out, objects=[S.SifObject(S.DATA_DEFFILE, data=b"bootstrap: docker\nfrom: x\n")],
                    created=0, uuid=bytes(16))
    data = bytearray(path.read_bytes())
    fields = list(DESCRIPTOR.unpack_from(data, S.DESCRIPTORS_OFFSET))
    names = ["datatype", "used", "id", "group", "linked", "offset", "size", "padded", "created", "modified"]
    for key, value in changes.items():
        fields[names.index(key)] = value
    DESCRIPTOR.pack_into(data, S.DESCRIPTORS_OFFSET, *fields)
    path.write_bytes(bytes(data) + os.urandom(1 << 20))  # something a runaway read would go on reading
    return path


@pytest.mark.parametrize("changes, says", [
    ({"size": -1}, "corrupt SIF file"),  # read the whole file into memory before
    ({"offset": -5}, "corrupt SIF file"),
    ({"offset": 1 << 62}, "corrupt SIF file"),
    ({"size": 1 << 40}, "corrupt SIF file"),
])
def test_a_sif_whose_objects_lie_outside_the_file_is_refused(tmp_path: Path, changes: dict, says: str) -> None:
    ran = run("inspect", str(sif_with(tmp_path, **changes)), "--json")
    clean_failure(ran, 1, says=says)


def test_sif_times_out_of_range_are_shown_not_a_crash(tmp_path: Path) -> None:
    path = sif_with(tmp_path, created=1 << 62, modified=-(1 << 62))
    data = bytearray(path.read_bytes())
    struct.pack_into("<qq", data, 64, 1 << 62, -(1 << 62))  # the global header's created and modified
    path.write_bytes(bytes(data))
    ran = run("inspect", str(path))
    assert ran.returncode == 0, ran.stderr
    assert "out of range" in ran.stdout and "Traceback" not in ran.stderr
    shown = run("inspect", str(path), "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["descriptors"][0]["created"] == 1 << 62


def test_inspect_of_a_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "x.sif"
    os.mkfifo(fifo)
    clean_failure(run("inspect", str(fifo), timeout=30), 2, says="not a regular file")


def test_inspect_shows_at_most_a_megabyte_of_a_huge_file_in_the_image(tmp_path: Path) -> None:
    import subprocess

    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    with (root / "etc" / "rc").open("wb") as rc:
        rc.truncate(1 << 30)  # 1 GiB of holes: a few bytes in the squashfs, a gigabyte when read
    image = tmp_path / "huge.sqsh"
    subprocess.run(["mksquashfs", str(root), str(image), "-quiet", "-no-progress", "-comp", "zstd"], check=True,
                   capture_output=True)
    ran = run("inspect", str(image), "--json", timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["files"]["/etc/rc"] == f"(more than {1 << 20} bytes: not shown)"
    assert ran.max_rss < 300 << 20, f"peak memory {ran.max_rss >> 20} MiB"
