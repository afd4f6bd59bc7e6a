"""The Python API (``import ckit``): its names, the schedulers' job control refusals, the job records, the
history parsers and the executor's options and job script (pure parts; tests/integration runs them)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import buildkit.api
import ckit
from buildkit.cli import main
from buildkit.launch import jobrecord, slurmctl
from buildkit.launch.jobcontrol import parse_since
from buildkit.orchestration import executor as _executor


def test_every_name_is_exported_and_loads():
    assert buildkit.api.__all__ == sorted(buildkit.api._EXPORTS)
    for name in ckit.__all__:
        assert getattr(ckit, name) is getattr(buildkit.api, name)
    assert callable(ckit.launch) and ckit.launch.__module__ == "buildkit.api._launch"  # not buildkit.launch
    assert set(ckit.__all__) <= set(dir(ckit))
    with pytest.raises(AttributeError):
        ckit.no_such_call  # noqa: B018


def test_the_clis_names_are_exported_and_load():
    """What the commands reach through the API besides its calls (buildkit.api._cli) loads by its name."""
    from buildkit.api import _cli

    assert sorted(_cli.__all__) == sorted(_cli._EXPORTS)
    for name in _cli.__all__:
        assert getattr(_cli, name) is not None
    assert _cli.pyxis_importer.__name__ == "main" and _cli.limits.__name__ == "buildkit.config.limits"
    with pytest.raises(AttributeError):
        _cli.no_such_name  # noqa: B018


@pytest.mark.parametrize("call", [lambda: ckit.jobs(site="apulis"), lambda: ckit.cancel("12", site="apulis"),
                                  lambda: ckit.logs("12", site="apulis"), lambda: ckit.Job("12", site="apulis")])
def test_a_dlws_site_refuses_job_control_and_says_where_to_look(call):
    with pytest.raises(ckit.ConfigError) as refused:
        call()
    assert "web portal" in str(refused.value) and refused.value.exit_code == 2


def test_the_cli_refuses_the_same(capsys):
    assert main(["jobs", "--site", "apulis"]) == 2
    assert "cannot list the jobs on a dlws site" in capsys.readouterr().err


def test_since_reads_durations_and_dates():
    now = 1_000_000.0
    assert parse_since("2d", now) == now - 2 * 86400 and parse_since("30m", now) == now - 1800
    assert parse_since("2024-05-01", now) == time.mktime((2024, 5, 1, 0, 0, 0, 0, 0, -1))
    for bad in ("2x", "٣d", "yesterday", ""):
        with pytest.raises(ckit.ConfigError, match="--since"):
            parse_since(bad, now)


def test_sacct_history_keeps_a_name_with_a_newline_in_its_row():
    token = "@ckit0123@"
    rows = [["7", "a\nb", "COMPLETED", "debug", "1", "00:00:05", "n1", "bob", "2024-05-01T10:00:00", "0:0"],
            ["8", "x", "CANCELLED by 0", "multi", "2", "00:01:00", "n[1-2]", "eve", "2024-05-01T11:00:00", "0:15"]]
    out = "".join(token.join(r) + "\n" for r in rows)
    found = slurmctl.parse_history(out, token)
    assert [(j.job_id, j.name, j.state, j.exit_code) for j in found] == [("7", "a\nb", "COMPLETED", 0),
                                                                          ("8", "x", "CANCELLED", 143)]
    assert slurmctl.parse_history("", token) == [] and slurmctl.exit_code("2:0") == 2


def test_job_records_are_found_by_id_and_time(tmp_path):
    first = jobrecord.new("41", "local", "slurm", "a", tmp_path, "%x.o%j", "%x.e%j", None)
    jobrecord.save(first, tmp_path)
    jobrecord.save(jobrecord.new("41", "twnia2", "slurm", "b", tmp_path, "b-%j.out", None, None), tmp_path)
    (tmp_path / "42@local.json").write_text("{not json")  # a damaged record is skipped
    assert jobrecord.find("41", tmp_path).name == "b"  # the newest of the two clusters' job 41
    assert jobrecord.find("41", tmp_path, site="local") == first
    jobrecord.finished(first, "COMPLETED", 0, tmp_path)
    assert jobrecord.find("41", tmp_path, site="local").state == "COMPLETED"
    assert [r.name for r in jobrecord.since(first.submitted, tmp_path)] == ["a", "b"]
    assert jobrecord.since(time.time() + 60, tmp_path) == [] and jobrecord.find("43", tmp_path) is None
    assert json.loads((tmp_path / "41@local.json").read_text())["output"] == "%x.o%j"


def test_a_record_that_cannot_be_written_is_a_warning_not_a_failure(tmp_path):
    (tmp_path / "file").write_text("")
    note = jobrecord.keep(jobrecord.new("5", "local", "slurm", "n", tmp_path, "o", None, None), tmp_path / "file")
    assert note is not None and "job 5 was submitted" in note


def test_executor_takes_launchs_options_and_submitits_names(tmp_path):
    ex = ckit.Executor(tmp_path / "log", "local", runtime="none", framework="ddp", cwd=tmp_path)
    ex.update_parameters(nodes=2, slurm_partition="multi", timeout_min=7, env={"A": "1"}, ntasks_per_node=1)
    assert (ex.request.nodes, ex.request.partition, ex.request.time, ex.request.env) == (2, "multi", "7",
                                                                                          (("A", "1"),))
    with pytest.raises(ckit.ConfigError, match="not an option of ckit launch") as bad:
        ex.update_parameters(node=2)
    assert "nodes" in (bad.value.hint or "")
    with pytest.raises(ckit.ConfigError, match="--time"):
        ex.update_parameters(time="soon")
        ex.plan()


def test_executor_plan_runs_submitit_in_every_task_with_the_versions(tmp_path):
    ex = ckit.Executor(tmp_path / "log", "local", runtime="none", framework="ddp", cwd=tmp_path)
    ex.update_parameters(nodes=2, partition="multi")
    plan = ex.plan()
    script = ckit.render(plan)
    versions = _executor.local_versions()
    assert plan.total_tasks == 2 and ex._num_tasks() == 2
    assert plan.command[:3] == ("python3", "-u", "-c") and "submitit_main()" in plan.command[3]
    assert plan.command[4:] == (str(tmp_path / "log"), *(f"{k}={v}" for k, v in versions.items()))
    assert "export SUBMITIT_EXECUTOR='slurm'" in script and 'export RANK="${SLURM_PROCID}"' in script
    assert f"#SBATCH --output={tmp_path}/log/%j_log.out" in script
    outside = ckit.Executor("/tmp/elsewhere", "local", runtime="none", cwd=tmp_path)
    assert outside.plan().mounts == ()  # on the node itself the folder is what it is
    boxed = ckit.Executor("/tmp/elsewhere", "local", runtime="charliecloud", image="/tmp/img.sqsh", cwd=tmp_path,
                          check_image=False)
    assert "/tmp/elsewhere:/tmp/elsewhere" in boxed.plan().mounts  # the pickles' folder reaches the tasks


def test_a_dlws_site_cannot_run_functions(tmp_path):
    ex = ckit.Executor(tmp_path / "log", "apulis", image="reg.example/img:1")
    with pytest.raises(ckit.ConfigError):
        ex.submit(sum, [1, 2])


def test_launch_is_one_call_and_writes_the_script(tmp_path):
    request = ckit.LaunchRequest(command=("hostname",), nodes=2, partition="multi", runtime="none")
    result = ckit.launch("local", request, ckit.Execution(submit=False, script=tmp_path / "x.sbatch"))
    assert result.job_id is None and Path(result.script or "").read_text() == ckit.render(
        ckit.plan_launch("local", request))
    shell = ckit.shell_command("local", ckit.LaunchRequest(command=(), runtime="none"))
    assert shell.argv[0] == "salloc" and "--job-name=ckit-shell" in shell.argv


def test_the_recipe_calls_are_the_commands(tmp_path, capsys):
    assert "hello" in {s["name"] for s in ckit.recipes()["stacks"]}
    assert ckit.show("hello")["stack"] == "hello"
    rendered = ckit.render_recipe("hello", fmt="singularity")
    assert rendered.text.startswith("Bootstrap: docker") and rendered.written == ()
    assert main(["render", "hello", "--format", "singularity"]) == 0
    assert capsys.readouterr().out == rendered.text
    written = ckit.render_recipe("hello", output=f"{tmp_path}/ctx/")
    assert (tmp_path / "ctx" / "Dockerfile").read_text() == written.text
    with pytest.raises(ckit.ConfigError, match="docker or singularity"):
        ckit.render_recipe("hello", fmt="podman")


def test_backends_and_nccl_report(tmp_path):
    assert {"slurm", "dlws"} <= {b["name"] for b in ckit.backends()["schedulers"]}
    with pytest.raises(ckit.ConfigError, match="cannot read"):
        ckit.nccl_report(tmp_path / "missing.out")


def test_executor_keeps_submitits_defaults_on_a_site_with_gpus(tmp_path):
    """Guide 001's first submitit example on neuron's cas_v100_2 (2 GPUs a node): one task, no GPUs, as
    submitit's own executor asks, so that job.result() has one result to read."""
    ex = ckit.Executor(tmp_path / "log_test", "neuron", image="/scratch/me/pytorch.sif", cwd=tmp_path, check_image=False)
    ex.update_parameters(partition="cas_v100_2", comment="python", timeout_min=10)
    plan = ex.plan()
    script = ckit.render(plan)
    assert (plan.total_tasks, plan.gpus_per_node, ex._num_tasks()) == (1, 0, 1)
    assert "--ntasks-per-node=1" in script and "--gres" not in script
    ex.update_parameters(gpus_per_node=2, cpus_per_task=4)
    plan = ex.plan()
    assert (plan.total_tasks, plan.gpus_per_node, plan.cpus_per_task) == (1, 2, 4)
    assert "#SBATCH --gres=gpu:2" in ckit.render(plan)
    ex.update_parameters(mem_gb=10)
    with pytest.raises(ckit.PolicyError, match=r"neuron forbids --mem \(rule policy.forbid_options\)"):
        ex.plan()


def test_executor_and_request_take_memory_as_sbatch_does(tmp_path):
    ex = ckit.Executor(tmp_path / "log", "local", runtime="none", cwd=tmp_path)
    ex.update_parameters(mem_gb=1.5)
    assert "#SBATCH --mem=1536M" in ckit.render(ex.plan())
    plan = ckit.plan_launch("local", ckit.LaunchRequest(command=("x",), runtime="none", mem_per_gpu="8G"))
    assert "#SBATCH --mem-per-gpu=8G" in ckit.render(plan)
    with pytest.raises(ckit.ConfigError, match="--mem and --mem-per-cpu ask for memory twice"):
        ckit.plan_launch("local", ckit.LaunchRequest(command=("x",), mem="1G", mem_per_cpu="1G"))
    with pytest.raises(ckit.ConfigError, match="--mem '10 G' is not an amount of memory"):
        ckit.plan_launch("local", ckit.LaunchRequest(command=("x",), mem="10 G"))


@pytest.mark.parametrize(("env", "names"), [
    ({"SBATCH_TIMELIMIT": "soon"}, ("env SBATCH_TIMELIMIT (the default of --time) 'soon' is not a Slurm time",
                                    "unset it (env SBATCH_TIMELIMIT), or give --time")),
    ({"SBATCH_PARTITION": "a b"}, ("env SBATCH_PARTITION (the default of --partition) 'a b'", "give --partition")),
    ({"CKIT_SITE": "nosuch"}, ("unknown site 'nosuch' (the default site, from env CKIT_SITE)",
                               "fix env CKIT_SITE or give --site")),
])
def test_a_bad_default_names_the_variable_it_came_from(tmp_path, env, names):
    from buildkit.config.user import load

    defaults = load({"CKIT_SITE": "local", **env, "XDG_CONFIG_HOME": str(tmp_path)})
    with pytest.raises(ckit.ConfigError) as err:
        ckit.plan_launch(None, ckit.LaunchRequest(command=("x",), runtime="none"), defaults=defaults)
    assert names[0] in err.value.message and names[1] in (err.value.hint or "")


def test_the_dry_run_shows_the_fetch_lines():
    plan = ckit.plan_launch("local", ckit.LaunchRequest(command=("x",), image="/tmp/x.sqsh", runtime="charliecloud",
                                                        fetch=("pip download -d wheels torch",)))
    assert "# --fetch, run here in the image before sbatch: pip download -d wheels torch\n" in ckit.render(plan)
