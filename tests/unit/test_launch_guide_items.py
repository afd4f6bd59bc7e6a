"""What the guides' users met (nccl-tests' GPUs, horovodrun in the image, site checks, logs, arrays): the plan and
the scripts, pure; tests/integration/test_launch_guides.py runs them."""

from __future__ import annotations

import pytest

from buildkit.cli import main
from buildkit.errors import ConfigError, PolicyError
from buildkit.launch.plan import LaunchRequest, plan_launch
from buildkit.launch.schedulers.slurm import render_sbatch
from buildkit.site import load_site


def _script(site: str, **kw: object) -> str:
    return render_sbatch(plan_launch(load_site(site), LaunchRequest(**{"command": ("python", "x.py"), **kw})))


# 3. nccl-tests: the node's GPUs are shared among its tasks ------------------------------------------------------------
def test_nccl_tests_gives_each_task_its_share_of_the_gpus():
    oci = {"framework": "nccl-tests", "nodes": 2, "image": "nvcr.io/nvidia/x:1", "command": ()}
    assert _script("oci", **oci).rstrip().endswith("all_reduce_perf -b 8 -e 8G -f 2 -g 8")
    assert _script("oci", **oci, tasks_per_node=8).rstrip().endswith("all_reduce_perf -b 8 -e 8G -f 2 -g 1")
    with pytest.raises(ConfigError, match="-g 8 in each of 8 tasks per node drives 64 GPUs; a node has 8") as err:
        _script("oci", **{**oci, "command": ("all_reduce_perf", "-b", "10G", "-g", "8")}, tasks_per_node=8)
    assert "give each task -g 1" in (err.value.hint or "")
    with pytest.raises(ConfigError, match="-t 2 -g 4"):
        _script("oci", **{**oci, "command": ("all_reduce_perf", "-t", "2", "-g4")}, tasks_per_node=2)
    with pytest.raises(ConfigError, match="--ntasks-per-node 3 does not divide the node's 8 GPUs"):
        _script("oci", **oci, tasks_per_node=3)


# 5. horovodrun runs where Horovod is ------------------------------------------------------------------------------------
def test_horovodrun_runs_in_the_image_on_one_node():
    script = _script("twnia2", account="P", framework="horovod", launcher="horovodrun", image="/w/hvd.sif")
    last = script.rstrip().splitlines()[-1]
    assert last.startswith('srun --kill-on-bad-exit=1 --export=ALL --nodes=1 --ntasks=1 env ')
    last = last.split(" singularity ", 1)[1]
    assert last.startswith('exec --nv '
                           '"${CKIT_IMAGE}" /bin/sh -c "${ckit_entry}" ckit-entrypoint horovodrun -np')
    assert "-H localhost:8 python x.py" in last
    with pytest.raises(ConfigError, match="cannot start containers on the other 1 node") as err:
        _script("twnia2", account="P", framework="horovod", launcher="horovodrun", image="/w/hvd.sif", nodes=2)
    assert "--launcher srun" in (err.value.hint or "")
    host = _script("neuron", comment="etc", runtime="none", framework="horovod", launcher="horovodrun", nodes=2)
    assert host.rstrip().splitlines()[-1].startswith('horovodrun -np $((SLURM_JOB_NUM_NODES * 4)) -H "${CKIT_HOSTS}"')


# 9. site checks --------------------------------------------------------------------------------------------------------
def test_a_partition_gives_no_more_nodes_than_it_names():
    with pytest.raises(PolicyError, match=r"tara partition dgx has 1 node\(s\) \(tara-dgx1-003\), you asked for 3"):
        _script("tara", account="p", runtime="none", partition="dgx", nodes=3)
    _script("tara", account="p", runtime="none", partition="dgx-preempt", nodes=2)


def test_neuron_says_which_source_dropped_a_guide_partition():
    with pytest.raises(ConfigError) as err:
        _script("neuron", comment="etc", runtime="none", partition="amd_a100_4")
    assert "partition table of 2024-11, which this profile follows, no longer lists it" in err.value.message
    assert "last updated 2022-07" in err.value.message and "amd_a100nv_8" in (err.value.hint or "")
    for kept in ("cas_v100_4", "cas_v100_2"):  # the guide's other partitions are still there
        _script("neuron", comment="etc", runtime="none", partition=kept)


def test_mpi_is_honoured_by_a_plain_command_and_refused_where_nothing_reads_it():
    assert "srun --kill-on-bad-exit=1 --export=ALL --mpi=pmix python x.py" in _script("local", mpi="pmix")
    assert "--mpi" not in _script("oci", image="nvcr.io/x/y:1")  # the site's plugin is for MPI frameworks only
    with pytest.raises(ConfigError, match="--mpi does not apply to --framework ray: drop it"):
        _script("local", framework="ray", mpi="pmix")


def test_mounts_need_a_container():
    with pytest.raises(ConfigError, match="--mount binds into a container; --runtime none runs on the node"):
        _script("local", mounts=("/data:/data",))


def test_a_refused_submit_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("USER", "kim")
    rc = main(["launch", "--site", "neuron", "--comment", "etc", "--runtime", "none", "--submit", "--", "true"])
    assert rc == 2 and "neuron accepts jobs only from /scratch/$USER" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# 8. logs ---------------------------------------------------------------------------------------------------------------
def test_the_log_folder_is_made_before_sbatch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "--site", "local", "-J", "tf_multi_test", "-o", "./out/%x.o%j", "-e", "%x-err/%x.e%j",
                 "--no-submit", "--", "true"]) == 0
    assert (tmp_path / "out").is_dir() and (tmp_path / "tf_multi_test-err").is_dir()


def test_a_log_folder_named_after_the_job_id_is_refused():
    with pytest.raises(ConfigError, match="its folder names something only the job knows") as err:
        _script("local", output="out-%j/log")
    assert "out/%x.o%j" in (err.value.hint or "")


# 11. arrays, dependencies, interactive --------------------------------------------------------------------------------
def test_array_and_dependencies_are_sbatch_options():
    script = _script("local", array="0-9%2", after=("12", "13_4"), command=("python", "x.py", "$SLURM_ARRAY_TASK_ID"))
    assert "#SBATCH --array=0-9%2\n#SBATCH --dependency=afterok:12:13_4\n" in script
    assert script.rstrip().endswith("""sh -c 'set -- python x.py "${SLURM_ARRAY_TASK_ID}"; exec "$@"' ckit-args""")
    for bad in ({"array": "1-"}, {"after": ("x",)}, {"array": "1", "interactive": True}):
        with pytest.raises(ConfigError):
            _script("local", **bad)


def test_wait_and_array_and_interactive_submit_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "--site", "local", "--array", "0-1", "--submit", "--wait", "--", "true"]) == 2
    assert "--wait follows one job" in capsys.readouterr().err
    assert main(["launch", "--site", "local", "--interactive", "--submit", "--", "true"]) == 2
    assert main(["launch", "--site", "local", "--interactive", "-p", "multi", "-N", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("salloc --job-name=ckit --partition=multi --nodes=2 ") and "srun --pty" in out
    assert list(tmp_path.iterdir()) == []


def test_fetch_needs_a_runtime_that_runs_here():
    with pytest.raises(ConfigError, match="--runtime pyxis starts containers only in a Slurm job"):
        plan_launch(load_site("oci"), LaunchRequest(command=("x",), image="nvcr.io/x/y:1", fetch=("wget x",)))


# 6. a log per host, as the oci guide's TensorFlow workers write them ---------------------------------------------
def test_a_per_node_log_pattern_goes_to_every_step():
    """sbatch expands ``%N`` for the batch host alone: the step says the pattern again, so each node writes its own."""
    script = _script("oci", framework="tf", nodes=2, image="nvcr.io/nvidia/tensorflow:24.06-tf2-py3",
                     output="%N.out", error="%N.err")
    assert "#SBATCH --output=%N.out\n#SBATCH --error=%N.err\n" in script
    step = script.rstrip().splitlines()[-1]
    assert step.startswith("srun --kill-on-bad-exit=1 --export=ALL --output=%N.out --error=%N.err "), step
    plain = _script("oci", framework="tf", nodes=2, image="nvcr.io/nvidia/tensorflow:24.06-tf2-py3", output="tf-%j.out")
    assert "--output=" not in plain.rstrip().splitlines()[-1]
