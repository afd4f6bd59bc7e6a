"""ckit doctor without a cluster: what makes a check absent or skipped (never passed), the checks by name, the
record written back to a profile; and the preflight of ckit launch."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from buildkit.cluster import doctor, preflight
from buildkit.cluster.checks import REGISTRY, CheckResult, Context, JobRun
from buildkit.cluster.checks.gpu import driver_ok
from buildkit.cluster.probe import Probe
from buildkit.errors import ConfigError
from buildkit.launch.plan import LaunchRequest, plan_launch
from buildkit.site.load import load_site_file

SITES = Path(__file__).parents[2] / "sites"


def _context(node: Probe, image: str | None = None, registry: str | None = None) -> Context:
    def never(*args: object) -> JobRun:
        raise AssertionError("no job may run")

    return Context(site=load_site_file(SITES / "local.yaml"), node=node, folder=Path("/nowhere"), launch=never,
                   script=never, artifact=never, image=image, registry=registry)  # type: ignore[arg-type]


def test_a_check_whose_runtime_the_nodes_lack_is_absent_and_runs_nothing() -> None:
    ctx = _context(Probe(host="n1", programs={"ch-run": "/usr/bin/ch-run"}), image="docker://busybox")
    status = {c.name: (r.status if (r := c.missing(ctx)) else "run") for c in REGISTRY.all()}
    for kind in ("apptainer", "singularity", "pyxis"):
        assert status[f"{kind}-runs"] == "absent"
    assert status["enroot-import"] == status["pyxis-relative-path"] == "absent"
    assert status["gpus"] == status["nccl"] == "absent"  # local has no GPU partition
    assert status["charliecloud-runs"] == status["job"] == status["two-nodes"] == "run"
    assert "passed" not in status.values()


def test_a_check_the_command_line_cannot_feed_is_skipped() -> None:
    ctx = _context(Probe(host="n1", programs={"apptainer": "/usr/bin/apptainer"}))
    assert REGISTRY.get("apptainer-runs", "--check").missing(ctx).status == "skipped"  # type: ignore[union-attr]
    ctx = _context(Probe(host="n1", programs={"apptainer": "/usr/bin/apptainer"}), image="docker://busybox")
    assert REGISTRY.get("apptainer-oras-pull", "--check").missing(ctx).status == "skipped"  # type: ignore[union-attr]


def test_checks_are_chosen_by_name() -> None:
    assert [c.name for c in doctor.select(("two-nodes", "job"))] == ["job", "two-nodes"]
    with pytest.raises(ConfigError, match="unknown check"):
        doctor.select(("jobb",))


def test_job_logs_are_read_by_their_marked_lines() -> None:
    run = JobRun(0, "srun: noise\nckit-doctor rank=1\n ckit-doctor rank=0\nckit-doctor pwd=/a=b\n")
    assert run.marked() == {"rank": ["1", "0"], "pwd": ["/a=b"]}


def test_a_runtime_that_fails_is_reported_in_its_own_words() -> None:
    ctx = _context(Probe(host="n1", programs={"ch-run": "/usr/bin/ch-run"}))
    log = ("ch-run[7]: error: can't bind: source not found: /home/u (ch_core.c:104)\n"
           "srun: error: n1: task 1: Exited with exit code 1\n")
    said = REGISTRY.get("charliecloud-runs", "--check").judge(ctx, JobRun(1, log, "648"))  # type: ignore[attr-defined]
    assert said.status == "failed" and said.detail.startswith("job 648 exit 1: ch-run[7]: error: can't bind")


def test_the_driver_must_run_the_images_cuda() -> None:
    assert driver_ok("535.104.05", "12.2") is True and driver_ok("470.82.01", "12.0") is False
    assert driver_ok("535.104.05", None) is None


def test_the_passes_go_back_to_the_profile_with_the_date(tmp_path: Path) -> None:
    path = tmp_path / "local.yaml"
    shutil.copy(SITES / "local.yaml", path)
    site = load_site_file(path)
    report = doctor.DoctorReport("local", "2026-01-02", "n1", str(tmp_path), [
        CheckResult("job", "passed", "ran", "scheduler"), CheckResult("two-nodes", "passed", "n1, n2", "partitions.multi"),
        CheckResult("apptainer-runs", "absent", "no apptainer"), CheckResult("podman-runs", "failed", "exit 1")])
    assert doctor.save(site, report) == str(path)
    again = load_site_file(path)
    assert again.doctor_date == "2026-01-02" and dict(again.doctor)["apptainer-runs"] == "absent"
    fact = again.fact("partitions.multi")
    assert fact is not None and fact.source == "ckit doctor 2026-01-02: two-nodes passed on n1"
    assert path.read_text().startswith("# This machine's own test Slurm")  # the header comment kept


def test_the_profiles_own_lines_and_comments_stay(tmp_path: Path) -> None:
    """Only the blocks doctor owns (facts, doctor) are written anew, in their place: a second run replaces them."""
    path = tmp_path / "local.yaml"
    text = (SITES / "local.yaml").read_text()
    path.write_text(text.replace("\nscheduler:", "\n# our queue: ask the admins before changing\nscheduler:", 1)
                    + "doctor: {date: '2025-01-01', node: old, checks: {}}  # from last year\n\n# the end\n")
    for day in ("2026-01-02", "2026-01-03"):
        report = doctor.DoctorReport("local", day, "n1", str(tmp_path), [
            CheckResult("two-nodes", "passed", "n1, n2", "partitions.multi")])
        assert doctor.save(load_site_file(path), report) == str(path)
    saved = path.read_text()
    assert "# our queue: ask the admins before changing\nscheduler:" in saved and saved.endswith("\n# the end\n")
    assert saved.count("\ndoctor:") == 1 and "2025-01-01" not in saved and "from last year" not in saved
    again = load_site_file(path)
    assert again.doctor_date == "2026-01-03" and dict(again.doctor) == {"two-nodes": "passed"}
    fact = again.fact("partitions.multi")
    assert fact is not None and fact.source == "ckit doctor 2026-01-03: two-nodes passed on n1"
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert [line for line in comments if line not in saved] == []


def test_a_built_in_profile_is_never_rewritten() -> None:
    """ckit's own profiles are the package's (writable for root on an editable install): doctor leaves them."""
    site = load_site_file(SITES / "local.yaml")
    before = (SITES / "local.yaml").read_bytes()
    report = doctor.DoctorReport("local", "2026-01-02", "n1", "/tmp", [CheckResult("job", "passed", "ran", "scheduler")])
    assert doctor.save(site, report) is None
    assert (SITES / "local.yaml").read_bytes() == before


def _plan(tmp_path: Path, *command: str, **fields: object) -> object:
    site = load_site_file(SITES / "local.yaml")
    return plan_launch(site, LaunchRequest(command=command, **fields))  # type: ignore[arg-type]


def test_preflight_names_a_relative_program_that_is_not_there(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "build/examples/example-3")
    found = preflight.problems(plan, tmp_path)  # type: ignore[arg-type]
    assert len(found) == 1 and "build/examples/example-3 is not in the submit folder" in found[0]
    (tmp_path / "build" / "examples").mkdir(parents=True)
    (tmp_path / "build" / "examples" / "example-3").write_text("")
    assert preflight.problems(plan, tmp_path) == []  # type: ignore[arg-type]


def test_preflight_refuses_with_every_problem_and_the_way_out(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "./missing", conda=str(tmp_path / "no-env"), runtime="none")
    with pytest.raises(ConfigError) as err:
        preflight.check(plan, tmp_path)  # type: ignore[arg-type]
    assert err.value.exit_code == 2 and "2 preflight checks failed" in str(err.value)
    assert "--no-preflight" in (err.value.hint or "")


def test_preflight_asks_how_many_tasks_when_gpus_share_a_node(tmp_path: Path) -> None:
    site = load_site_file(SITES / "local.yaml")
    gpus = replace(site, partitions=tuple(replace(p, gpus_per_node=4, cpus_per_node=8) for p in site.partitions))
    plan = plan_launch(gpus, LaunchRequest(command=("prog",), gpus_per_node=4))
    assert "state it (--ntasks-per-node 4" in preflight.problems(plan, tmp_path)[0]
    plan = plan_launch(gpus, LaunchRequest(command=("prog",), gpus_per_node=4, tasks_per_node=1))
    assert preflight.problems(plan, tmp_path) == []
