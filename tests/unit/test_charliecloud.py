"""Charliecloud: the /ch files and mount points a .sqsh carries, and the ch-run words of `ckit launch` (pure).

The real runs (ch-run on a converted minimal image, jobs under Slurm as root and as an unprivileged user) are in
tests/integration/test_charliecloud_runs.py and the real-run matrix.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from buildkit.errors import ConfigError, ConvertError
from buildkit.image.model import ImageConfig, When
from buildkit.image.rootfs import charliecloud as C
from buildkit.launch import runtimes
from buildkit.launch.plan import LaunchRequest, plan_launch
from buildkit.launch.schedulers.slurm import render_sbatch
from buildkit.orchestration.stage import plan_stage, site_target
from buildkit.site import load_site
from buildkit.site.model import Runtime
from buildkit.storage.cache import CacheDir
from tests.unit.test_cachedir import put, stage_record

SQSH = "/shared/app.sqsh"


# --- the image: /ch/environment, /ch/metadata.json, mount points ------------------------------------------------

def test_environment_is_sorted_last_wins_and_survives_ch_runs_quote_stripping() -> None:
    cfg = ImageConfig(env=("PATH=/usr/bin:/bin", "B='quoted'", "A=$HOME:x", "A=again", "NOVALUE", "=x", "S='",
                           "E=", "Q=''"))
    # ch-run strips one pair of single quotes around a value: those that have one get a protecting pair
    assert C.environment_text(cfg) == "A=again\nB=''quoted''\nE=\nPATH=/usr/bin:/bin\nQ=''''\nS='\n"


def test_environment_refuses_a_line_break() -> None:
    with pytest.raises(ConvertError, match="'BAD'.*line break"):
        C.environment_text(ImageConfig(env=("BAD=a\nb",)))


def test_metadata_is_ch_images_with_the_workdir() -> None:
    cfg = ImageConfig(env=("X=1",), working_dir="/workspace", labels=(("b", "2"), ("a", "1")), volumes=("/data",),
                      architecture="arm64", raw={"Shell": ["/bin/bash", "-c"]})
    text = C.metadata_text(cfg)
    assert json.loads(text) == {"arch": "arm64", "arg": {}, "cwd": "/workspace", "env": {"X": "1"}, "history": [],
                                "labels": {"a": "1", "b": "2"}, "shell": ["/bin/bash", "-c"], "volumes": ["/data"]}
    assert text.endswith("}\n") and text.startswith('{\n  "arch"')  # indent=2, sorted keys, like ch-image
    assert json.loads(C.metadata_text(ImageConfig()))["cwd"] == "/"


def test_entries_add_ch_files_always_and_mount_points_only_where_absent() -> None:
    got = C.entries(ImageConfig(volumes=("/data",)))
    assert [(e.path, e.kind, e.when) for e in got[:3]] == [
        ("/ch", "dir", When.ALWAYS), ("/ch/environment", "file", When.ALWAYS), ("/ch/metadata.json", "file", When.ALWAYS)]
    absent = {e.path: (e.kind, e.mode) for e in got[3:]}
    assert all(e.when is When.IF_ABSENT for e in got[3:])
    # exactly what ch-run 0.31 binds (found by running it on a busybox-only image), + --home, /mnt/N, volumes
    for path in ("/dev", "/proc", "/sys", "/home", "/mnt", "/mnt/0", "/mnt/9", "/data"):
        assert absent[path] == ("dir", 0o755), path
    assert absent["/tmp"] == ("dir", 0o1777)
    for path in ("/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf"):
        assert absent[path] == ("file", 0o644), path
    with pytest.raises(ConvertError, match="absolute path"):
        C.entries(ImageConfig(volumes=("/a/../../x",)))


# --- the runtime ----------------------------------------------------------------------------------------------

def _plan(**kw):  # type: ignore[no-untyped-def]
    request = LaunchRequest(command=("python3", "x.py", "$$(touch pwned)", "it's"), runtime="charliecloud",
                            image=SQSH, **kw)
    return plan_launch(load_site("local"), request)


def test_registered_by_its_module_alone() -> None:
    backend = runtimes.REGISTRY.get("charliecloud", "--runtime")
    assert backend.artifact == "sqsh" and not backend.refs and "charliecloud" in runtimes.REGISTRY.help()
    assert [r.kind for r in load_site("local").runtimes] == ["podman", "charliecloud", "apptainer", "none"]


def test_the_task_line_sets_env_workdir_binds_and_keeps_arguments_verbatim() -> None:
    script = render_sbatch(_plan(framework="ddp", env=(("GREETING", "a 'b' $$c"),), mounts=("/data:/mnt/0:rw",)))
    assert 'export USER="${USER:-${SLURM_JOB_USER:-$(id -un)}}"' in script  # ch-run refuses to start without USER
    assert 'ckit_ch_run=(ch-run --cd "${SLURM_SUBMIT_DIR}" -b "${SLURM_SUBMIT_DIR}:${SLURM_SUBMIT_DIR}" ' \
           "-b /data:/mnt/0 --env-no-expand --set-env)\n" in script
    # --home only where $HOME is a folder: ch-run stops at a bind whose source is not there
    assert 'if [ -d "$HOME" ]; then ckit_ch_run+=(--home); else echo ' in script
    step = next(line for line in script.splitlines() if line.startswith("srun "))
    assert step.startswith('srun --kill-on-bad-exit=1 --export=ALL "${ckit_ch_run[@]}" '
                           "--set-env=\"GREETING='${GREETING}'\" --set-env=\"MASTER_ADDR='${MASTER_ADDR}'\" ")
    assert step.endswith("""\"${CKIT_IMAGE}" -- sh -c 'export RANK="${SLURM_PROCID}" LOCAL_RANK="${SLURM_LOCALID}" """
                         """NODE_RANK="${SLURM_NODEID}"; exec "$@"' ckit-task python3 x.py '$(touch pwned)' 'it'"'"'s'""")
    assert "--cd /code " in render_sbatch(_plan(workdir="/code"))
    assert 'ch-run --join --join-tag="ckit-${SLURM_JOB_ID}-${RANDOM}${RANDOM}" --cd' in render_sbatch(
        _plan(tasks_per_node=2))


def test_tasks_that_share_a_container_wait_for_each_other() -> None:
    """ch-run --join: the container lives as long as the first task's command, so each task's command is held until
    all of the node's have ended (tests/integration/test_charliecloud_runs.py runs it)."""
    step = next(line for line in render_sbatch(_plan(tasks_per_node=2)).splitlines() if line.startswith("srun "))
    assert '"${CKIT_IMAGE}" -- sh -c \'"$@"; ckit_rc=$?; ' in step and " -ge 2 ]" in step
    assert 'ckit_j="/tmp/.ckit-join-${SLURM_JOB_ID}.${SLURM_STEP_ID}.${SLURM_NODEID}"' in step  # one count per node
    assert step.endswith("exit $ckit_rc' ckit-join python3 x.py '$(touch pwned)' 'it'\"'\"'s'")
    single = next(line for line in render_sbatch(_plan()).splitlines() if line.startswith("srun "))
    assert "ckit-join" not in single


@pytest.mark.parametrize(("kw", "says"), [
    ({"image": "localhost/busybox:1.36"}, "runs image files, not the reference"),
    ({"image": "/x/app.sif"}, "runs .sqsh, .squashfs files"),
    ({"mounts": ("/data:/data:ro",)}, "read-only"),
    ({"gpus_per_node": 1}, "ch-fromhost --nvidia"),
    ({"venv": "/opt/venv"}, "does not reach inside"),
])
def test_what_ch_run_cannot_do_is_refused_with_the_fix(kw: dict, says: str) -> None:
    request = {"command": ("true",), "runtime": "charliecloud", "image": SQSH, **kw}
    with pytest.raises(ConfigError, match=says) as err:
        plan_launch(load_site("local"), LaunchRequest(**request))
    assert err.value.hint


def test_a_site_names_charliecloud_with_its_module_and_executable() -> None:
    site = dataclasses.replace(load_site("local"), runtimes=(
        Runtime(kind="charliecloud", module="charliecloud/0.31", command="/opt/ch/bin/ch-run", flags=("-v",)),))
    script = render_sbatch(plan_launch(site, LaunchRequest(command=("true",), image=SQSH)))
    assert "module load charliecloud/0.31\n" in script
    assert "ckit_ch_run=(/opt/ch/bin/ch-run -v --cd " in script


# --- staged images: the runtime's format comes from its backend, not from a table ------------------------------

def test_launch_finds_the_sqsh_staged_for_a_stack_and_stage_makes_sqsh(tmp_path: Path) -> None:
    """Before: launch said 'the charliecloud runtime runs registry images, not staged stacks' (a table in
    cachedir named pyxis/singularity/apptainer only), and `ckit stage --site` made no .sqsh for it."""
    site = dataclasses.replace(load_site("local"), shared_image_dir=str(tmp_path / "shared"),
                               runtimes=(Runtime(kind="charliecloud"),))
    cache = CacheDir(tmp_path / "shared")
    key = put(cache, "img", target="sqsh")
    stage_record(cache, "stacks", "test-torch.sqsh.zstd:-3", key, compression="zstd:-3")
    plan = plan_launch(site, LaunchRequest(command=("true",), image="test-torch"))
    assert plan.image is not None and plan.image.value == str(tmp_path / "shared" / f"u{os.geteuid()}" / "artifacts" / f"{key}.sqsh")
    assert site_target(site) == "sqsh" and site_target(load_site("local")) == "sqsh"
    assert plan_stage("test-torch", tmp_path / "shared", site, to=None, compress=None, is_stack=True).target == "sqsh"
