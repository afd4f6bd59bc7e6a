"""``ckit launch --code DIR[:DEST]``: the code folder read, copied once per content and laid over the image by every
runtime (launch/code.py, api/_code.py; the jobs that run it: tests/integration/test_launch_code.py)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from buildkit import api
from buildkit.api._code import code_tree
from buildkit.cli import main
from buildkit.errors import CkitError, ConfigError, LaunchError
from buildkit.launch import code, jobrecord
from buildkit.launch.plan import LaunchRequest
from buildkit.launch.schedulers.slurm import render_sbatch
from buildkit.site import load_site
from buildkit.site.model import Runtime
from tests.unit.test_first_hour_rules import write_readme_project


def _folder(root: Path) -> Path:
    (root / "app/pkg").mkdir(parents=True)
    (root / "app/main.py").write_text("print('v1')\n")
    (root / "app/pkg/run.sh").write_text("#!/bin/sh\n")
    (root / "app/pkg/run.sh").chmod(0o755)
    (root / "app/link").symlink_to("main.py")
    (root / "app/.git").mkdir()
    (root / "app/.git/HEAD").write_text("ref\n")
    (root / "app/__pycache__").mkdir()
    (root / "app/__pycache__/main.cpython-311.pyc").write_bytes(b"\0")
    return root / "app"


def _hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    read: list[str] = []
    real = code._hash
    monkeypatch.setattr(code, "_hash", lambda path: read.append(path.name) or real(path))
    return read


def _age(folder: Path, seconds: float) -> None:
    """Every file as modified ``seconds`` ago (older than the racy window of the index)."""
    for path in folder.rglob("*"):
        if not path.is_symlink():
            then = os.stat(path).st_mtime - seconds
            os.utime(path, (then, then))


def test_scan_holds_what_the_job_runs_and_leaves_out_history_and_byte_code(tmp_path: Path) -> None:
    tree = code.scan(_folder(tmp_path), "/workspace/app")
    assert [(e.path, e.kind, e.executable) for e in tree.entries] == [
        ("link", "l", False), ("main.py", "f", False), ("pkg", "d", False), ("pkg/run.sh", "f", True)]
    assert tree.digest.startswith("sha256:") and tree.files == 2 and tree.size == 12 + 10
    assert code.scan(tmp_path / "app", "/elsewhere").digest == tree.digest  # the content, not where it goes


@pytest.mark.parametrize("change", ["edit", "mode", "rename", "link"])
def test_any_change_of_the_code_is_a_new_digest(tmp_path: Path, change: str) -> None:
    folder = _folder(tmp_path)
    before = code.scan(folder, "/w").digest
    if change == "edit":
        (folder / "main.py").write_text("print('v2')\n")
    elif change == "mode":
        (folder / "main.py").chmod(0o755)
    elif change == "rename":
        (folder / "main.py").rename(folder / "other.py")
    else:
        (folder / "link").unlink()
        (folder / "link").symlink_to("pkg/run.sh")
    assert code.scan(folder, "/w").digest != before


def test_an_unchanged_file_is_not_read_again_and_an_edited_one_is(tmp_path: Path, monkeypatch) -> None:
    folder, index = _folder(tmp_path), tmp_path / "index"
    _age(folder, 60)
    read = _hashes(monkeypatch)
    code.pack(code.scan(folder, "/w", index), tmp_path / "submit", index)
    assert sorted(read) == ["main.py", "run.sh"]
    read.clear()
    (folder / "main.py").write_text("print('v2')\n")
    tree = code.scan(folder, "/w", index)
    assert read == ["main.py"] and tree.digest == code.scan(folder, "/w").digest


def test_a_file_edited_just_after_the_scan_is_read_again(tmp_path: Path, monkeypatch) -> None:
    """Same size, and within the clock's reach of the last scan: its stats alone cannot say it is unchanged."""
    folder, index = _folder(tmp_path), tmp_path / "index"
    code.pack(code.scan(folder, "/w", index), tmp_path / "submit", index)
    read = _hashes(monkeypatch)
    code.scan(folder, "/w", index)
    assert sorted(read) == ["main.py", "run.sh"]


def test_the_copy_is_read_only_and_shares_unchanged_files_with_the_last(tmp_path: Path) -> None:
    folder, submit = _folder(tmp_path), tmp_path / "submit"
    first, made = code.pack(code.scan(folder, "/w"), submit)
    assert made and first == submit / ".ckit/code" / first.name and (first / "main.py").read_text() == "print('v1')\n"
    assert not (first / ".git").exists() and os.readlink(first / "link") == "main.py"
    assert (first / "main.py").stat().st_mode & 0o777 == 0o444 and (first / "pkg/run.sh").stat().st_mode & 0o777 == 0o555
    (folder / "main.py").write_text("print('v2')\n")
    second, _ = code.pack(code.scan(folder, "/w"), submit)
    assert (second / "main.py").read_text() == "print('v2')\n" and (first / "main.py").read_text() == "print('v1')\n"
    assert (second / "pkg/run.sh").stat().st_ino == (first / "pkg/run.sh").stat().st_ino
    again, made = code.pack(code.scan(folder, "/w"), submit)
    assert again == second and not made
    assert sorted(p.name for p in (submit / ".ckit/code").iterdir()) == sorted(["objects", first.name, second.name])


def test_a_file_changed_between_plan_and_pack_fails_and_leaves_no_copy(tmp_path: Path) -> None:
    folder, submit = _folder(tmp_path), tmp_path / "submit"
    tree = code.scan(folder, "/w")
    (folder / "main.py").write_text("print('changed')\n")
    with pytest.raises(LaunchError, match=r"main.py changed while ckit packed it") as err:
        code.pack(tree, submit)
    assert err.value.exit_code != 0
    assert sorted(p.name for p in (submit / ".ckit/code").iterdir()) == ["objects"]


@pytest.mark.parametrize(("value", "message"), [
    ("", "is not DIR"), ("app:workspace", "is not an absolute folder"), ("app:/", "is not an absolute folder"),
    ("app:/a,b", "is not an absolute folder")])
def test_code_values_that_are_refused(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        code.parse(value)


def test_a_folder_that_is_not_there_or_holds_a_fifo_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        code.scan(tmp_path / "nothing", "/w")
    folder = _folder(tmp_path)
    os.mkfifo(folder / "pipe")
    with pytest.raises(ConfigError, match="pipe is a FIFO"):
        code.scan(folder, "/w")


# --- where the code goes --------------------------------------------------------------------------------------------

def test_dest_is_where_the_readme_stack_copies_the_folder(tmp_path: Path) -> None:
    project = write_readme_project(tmp_path)
    tree = code_tree(str(project / "app"))
    assert tree.dest == "/workspace/app" and tree.source == str(project / "app")


def test_a_folder_no_stack_copies_needs_a_dest(tmp_path: Path) -> None:
    (tmp_path / "loose").mkdir()
    with pytest.raises(ConfigError, match="where does .* go in the image") as err:
        code_tree(str(tmp_path / "loose"))
    assert ":/workspace/app" in (err.value.hint or "")
    assert code_tree(f"{tmp_path / 'loose'}:/opt/mine").dest == "/opt/mine"


# --- every runtime lays it over the image ---------------------------------------------------------------------------

MOUNT = "${SLURM_SUBMIT_DIR}/.ckit/code/"


def _script(tmp_path: Path, site: str, runtime: str, image: str | None, value: str = "") -> str:
    folder = tmp_path / "app"
    if not folder.exists():
        _folder(tmp_path)
    request = LaunchRequest(command=("python3", "/workspace/app/main.py"), image=image, runtime=runtime,
                            code=value or f"{folder}:/workspace/app", account="p1", time="00:10:00",
                            comment="python")
    profile = load_site(site)
    if runtime == "apptainer":  # no built-in site runs apptainer: tara as if it did
        profile = dataclasses.replace(profile, runtimes=(Runtime("apptainer"), *profile.runtimes))
    return render_sbatch(api.plan_launch(profile, request))


@pytest.mark.parametrize(("site", "runtime", "image", "words"), [
    ("local", "podman", "localhost/myapp:1", '--volume "${SLURM_SUBMIT_DIR}/.ckit/code/{n}:/workspace/app:ro"'),
    ("local", "charliecloud", "/i/myapp.sqsh", '-b "${SLURM_SUBMIT_DIR}/.ckit/code/{n}:/workspace/app"'),
    ("neuron", "singularity", "/i/myapp.sif", '--bind "${SLURM_SUBMIT_DIR}/.ckit/code/{n}:/workspace/app:ro"'),
    ("tara", "apptainer", "/i/myapp.sif", '--bind "${SLURM_SUBMIT_DIR}/.ckit/code/{n}:/workspace/app:ro"'),
    ("oci", "pyxis", "/i/myapp.sqsh", ',${SLURM_SUBMIT_DIR}/.ckit/code/{n}:/workspace/app:ro"'),
])
def test_each_runtime_binds_the_copy_read_only_over_the_image(tmp_path, site, runtime, image, words) -> None:
    tree = code.scan(_folder(tmp_path), "/workspace/app")
    script = _script(tmp_path, site, runtime, image)
    assert words.replace("{n}", tree.name) in script
    assert f"export CKIT_CODE='/workspace/app'\nexport CKIT_CODE_DIGEST='{tree.digest}'" in script
    assert f"# code: {tree.digest} (2 files, 22 bytes) from '{tmp_path / 'app'}'" in script


def test_podman_lays_the_code_over_the_submit_folder_too(tmp_path: Path) -> None:
    script = _script(tmp_path, "local", "podman", "localhost/myapp:1")
    assert script.index('"${SLURM_SUBMIT_DIR}:${SLURM_SUBMIT_DIR}"') < script.index(MOUNT)


def test_without_a_container_the_tasks_find_the_copy_at_ckit_code(tmp_path: Path) -> None:
    tree = code.scan(_folder(tmp_path), "")
    script = _script(tmp_path, "local", "none", None, str(tmp_path / "app"))
    assert f'export CKIT_CODE="${{SLURM_SUBMIT_DIR}}/.ckit/code/{tree.name}"' in script
    with pytest.raises(ConfigError, match="starts no container to lay the code over"):
        _script(tmp_path, "local", "none", None, f"{tmp_path / 'app'}:/w")


def test_the_apulis_platform_refuses_code(tmp_path: Path) -> None:
    with pytest.raises(CkitError, match="--code: apulis"):
        _script(tmp_path, "apulis", "none", "apulistech/mindspore:0.3.0-withtools")


def test_plan_without_the_folder_read_is_refused() -> None:
    from buildkit.launch.plan import plan_launch

    with pytest.raises(ConfigError, match="the folder was not read"):
        plan_launch(load_site("local"), LaunchRequest(command=("true",), code="app:/w"))


# --- the command line and the job record ----------------------------------------------------------------------------

def test_launch_writes_the_copy_beside_the_script_and_records_the_digest(tmp_path, capsys, monkeypatch) -> None:
    project = write_readme_project(tmp_path)
    submit = tmp_path / "submit"
    submit.mkdir()
    monkeypatch.chdir(submit)
    monkeypatch.setattr("buildkit.launch.slurmctl.slurm_run", _fake_sbatch)
    rc = main(["launch", "--site", "local", "--runtime", "podman", "--image", "localhost/myapp:1", "--code",
               str(project / "app"), "--submit", "--json", "--", "python", "/workspace/app/main.py"])
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert rc == 0 and data["job_id"] == "4242", captured.err
    shipped = data["code"]
    assert shipped["dest"] == "/workspace/app" and shipped["new"] and shipped["files"] == 1
    assert Path(shipped["folder"], "main.py").read_text() == (project / "app/main.py").read_text()
    assert Path(shipped["folder"]).parent == submit / ".ckit/code"
    record = jobrecord.find("4242")
    assert record is not None and (record.code, record.code_source) == (shipped["digest"], str(project / "app"))
    assert f"code {shipped['digest'][:19]}: 1 files of {project / 'app'}" in captured.err


def _fake_sbatch(argv, purpose, **kwargs):
    from buildkit.process import Result

    return Result(argv, 0, "4242\n", "")
