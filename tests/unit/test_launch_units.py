"""Plans, policy messages, quoting, nccl-tests parsing and the seed guides' scripts (pure)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from buildkit.errors import ConfigError, PolicyError
from buildkit.launch.nccl_report import parse
from buildkit.launch.plan import LaunchRequest, plan_launch
from buildkit.launch.runtimes.pyxis import pyxis_ref
from buildkit.launch.schedulers.dlws import render_dlws
from buildkit.launch.schedulers.slurm import render_sbatch
from buildkit.launch.shell import expand_quote, time_minutes
from buildkit.site import load_site
from tests.testdata import all_reduce_1node, all_reduce_2nodes, hccl_rank_table
from tests.unit.launch_cases import APULIS_REQUESTS, SEED_REQUESTS


def _script(case: str) -> str:
    site, request = SEED_REQUESTS[case]
    return render_sbatch(plan_launch(load_site(site), request))


def _sbatch(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


# --- seed guides: ckit's script does what the hand-written one does ---------------------------------------------

def test_seed000_twnia2_same_resources_runtime_and_env():
    script = _script("000-twnia2-horovod")
    assert _sbatch(script)[:-1] == ["--job-name=Hello_twcc", "--partition=gtest", "--account=PROJECT_ID", "--nodes=2",
                                    "--ntasks-per-node=8", "--cpus-per-task=4", "--gres=gpu:8", "--time=00:10:00"]
    assert "module purge\nmodule load singularity\n" in script
    assert "export TF_ENABLE_AUTO_MIXED_PRECISION='1'" in script and "export NCCL_DEBUG='INFO'" in script
    # exec, not run: the SIF's runscript would re-evaluate the arguments; the ENTRYPOINT that run starts is
    # started by the task itself (ckit_entry); no --mpi (the guide shows none)
    # the job's variables go in by the prefixed names, which win over the image's ENV of the same name
    env = " ".join(f'{p}ENV_{n}="${{{n}}}"' for n in ("NCCL_DEBUG", "TF_ENABLE_AUTO_MIXED_PRECISION", "CKIT_HOSTS")
                   for p in ("SINGULARITY", "APPTAINER"))
    assert f'srun --kill-on-bad-exit=1 --export=ALL env {env} singularity exec --nv "${{CKIT_IMAGE}}" ' \
           '/bin/sh -c "${ckit_entry}" ckit-entrypoint python pytorch_synthetic_benchmark.py --batch-size 256' in script
    assert "export CKIT_IMAGE=/work/TWCC_cntr/pytorch_20.09-py3_horovod.sif" in script


def test_seed001_neuron_horovodrun_hosts_from_the_node_list():
    script = _script("001-neuron-horovodrun")
    opts = _sbatch(script)
    assert "--comment=tensorflow" in opts and "--partition=cas_v100_4" in opts and "--gres=gpu:2" in opts
    assert not any(o.startswith("--mem") for o in opts)
    assert 'CKIT_HOSTS=$(printf "%s:2," "${ckit_nodes[@]}")' in script
    assert script.rstrip().endswith('horovodrun -np $((SLURM_JOB_NUM_NODES * 2)) -H "${CKIT_HOSTS}" --gloo '
                                    "--network-interface ib0 python tensorflow2_mnist.py")


def test_seed001_neuron_ddp_and_tf_computed_from_slurm():
    ddp = _script("001-neuron-ddp")
    assert 'export MASTER_ADDR="${ckit_nodes[0]}"' in ddp
    assert "RANK=\"${SLURM_PROCID}\" LOCAL_RANK=\"${SLURM_LOCALID}\"" in ddp
    # the guide's arguments, read per task after the glue set NODE_RANK
    assert ddp.rstrip().endswith("""ckit-task sh -c 'set -- python main.py -a config --dist-url "tcp://${MASTER_ADDR}:"""
                                 """${MASTER_PORT}" --dist-backend nccl --multiprocessing-distributed --world-size """
                                 """"${SLURM_JOB_NUM_NODES}" --rank "${NODE_RANK}"; exec "$@"' ckit-args""")
    tf = _script("001-neuron-tf")
    assert "TF_CONFIG" in tf and "${SLURM_PROCID}" in tf and "ckit_i < 1" in tf and "--output=./out/%x.o%j" in tf


def test_seed002_oci_pyxis_mounts_mpi_and_nccl_env():
    script = _script("002-oci-nccl-tests")
    assert _sbatch(script)[:-1] == ["--job-name=tensorflow", "--partition=compute", "--nodes=2",
                                    "--ntasks-per-node=1", "--cpus-per-task=64", "--gres=gpu:8"]
    assert "export CKIT_IMAGE='nvcr.io#nvidia/tensorflow:24.06-tf2-py3'" in script
    for name, value in [("NCCL_IB_QPS_PER_CONNECTION", "4"), ("NCCL_IB_GID_INDEX", "3"),
                        ("NCCL_IB_HCA", "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9,mlx5_10,mlx5_11,"
                                        "mlx5_12,mlx5_13,mlx5_14,mlx5_15,mlx5_16,mlx5_17")]:
        assert f"export {name}='{value}'" in script
    step = script.splitlines()[-1]
    assert step.startswith('srun --kill-on-bad-exit=1 --export=ALL --mpi=pmi2 --container-image="${CKIT_IMAGE}" '
                           '--container-name="${ckit_container}" --container-mounts="/mnt/home/${USER}:/mnt/home/${USER},'
                           '${SLURM_SUBMIT_DIR}:${SLURM_SUBMIT_DIR}" --container-workdir="${SLURM_SUBMIT_DIR}" '
                           '--container-env=')
    assert step.endswith(" all_reduce_perf -b 10G -e 10G -t 1 -g 8")
    assert "#SBATCH --container" not in script


def test_seed003_apulis_command_and_legacy_npu_script():
    hvd = render_dlws(plan_launch(load_site("apulis"), APULIS_REQUESTS["003-apulis-horovod"]))
    # the guide's own Command; ~ and ${DLWS_JOB_ID} expand on the platform
    assert hvd.command == ("cd ~ && mkdir -p ~/checkpoints && horovodrun -np 16 -hostfile "
                           "/home/${DLWS_USER_NAME}/ib_config -p $DLWS_SD_worker0_SSH_PORT --network-interface ib0 "
                           "python /examples/tensorflow2_keras_mnist.py ~/checkpoints/ "
                           '~/"tensorboard/${DLWS_JOB_ID}/logs/" && sleep infinity')
    assert ("Number of Nodes", "2") in hvd.form and ("Device Type", "Nvidia") in hvd.form
    one = render_dlws(plan_launch(load_site("apulis"), APULIS_REQUESTS["003-apulis-horovod-1node"]))
    assert ("Job Type", "Distributed Job") in one.form and " -np 8 " in one.command
    ms = render_dlws(plan_launch(load_site("apulis"), APULIS_REQUESTS["003-apulis-mindspore"]))
    (path, text), = ms.files
    # the guide's Command form (sudo -E bash -c '… && sleep infinity'); the program and its arguments are the
    # script's, read by each process after the script set DEVICE_NUM (the platform's shell would read it empty)
    assert ms.command == f"sudo -E bash -c 'cd /data/resnet50_cifar10 && bash {path} && sleep infinity'"
    assert ("set -- sh -c 'set -- python train.py --do_train=True --run_distribute=True \"--device_num=${DEVICE_NUM}\" "
            "--dataset_path=/data/cifar10; exec \"$@\"' ckit-args\n") in text
    assert "ulimit -u unlimited" in text and '(cd "$dir" && env > env.log && exec "$@") &' in text
    assert 'os.getenv("RANK_SIZE")' in ms.text() and f"cat > \"{path}\" <<'CKIT_EOF'" in ms.text()
    assert "export DEVICE_NUM=8\n" in text and 'export RANK_SIZE="$(( ${DLWS_NUM_WORKER:-1} * DEVICE_NUM ))"' in text
    assert 'export CKIT_NODE_INDEX="${DLWS_ROLE_IDX:-0}"' in text and "RANK_ID=$((node * DEVICE_NUM + i))" in text
    assert "trap " in text and 'dir="$CKIT_RUN_DIR/rank$RANK_ID"' in text
    assert ":/code\"" in text
    assert 'export RANK_TABLE_FILE="/home/${DLWS_USER_NAME}/.npu/${DLWS_JOB_ID}/hccl_ms.json"' in text


def test_seed004_tara_ddp_world_size_and_account():
    script = _script("004-tara-ddp")
    assert "--account=proj0001" in _sbatch(script) and "--ntasks-per-node=8" in _sbatch(script)
    assert 'export WORLD_SIZE="${SLURM_NTASKS:-$((SLURM_JOB_NUM_NODES * 8))}"' in script
    assert "export MASTER_PORT=$((15000 + SLURM_JOB_ID % 15000))" in script
    assert "singularity" not in script


# --- policy -------------------------------------------------------------------------------------------------------

def _policy_error(site: str, **kw: object) -> str:
    with pytest.raises(PolicyError) as err:
        plan_launch(load_site(site), LaunchRequest(command=("x",), **kw))  # type: ignore[arg-type]
    assert err.value.exit_code == 2
    return err.value.message


def test_twnia2_cpu_ratio_message():
    message = _policy_error("twnia2", image="/a.sif", account="P1", tasks_per_node=8, cpus_per_task=8)
    assert "twnia2 gives 4 CPUs per GPU: 8 GPUs allow at most 32 CPUs per node, you asked for 64" in message


def test_neuron_requires_comment_from_the_list():
    message = _policy_error("neuron", image="/a.sif")
    assert message.startswith("neuron requires --comment, one of: charmm, gaussian, openfoam")


def test_tara_registry_image_needs_staging():
    message = _policy_error("tara", image="nvcr.io/nvidia/pytorch:24.06-py3", account="p1")
    assert message.startswith("tara compute nodes have no internet (rule compute_internet): stage the image first")


def test_partition_limits_time_and_gpus():
    message = _policy_error("twnia2", image="/a.sif", account="P1", partition="gtest", time="01:00:00", nodes=6)
    assert "allows at most 00:30:00, you asked for 01:00:00" in message and "allows 40 GPUs per user" in message


def test_defaults_come_from_the_site():
    plan = plan_launch(load_site("twnia2"), LaunchRequest(command=("x",), image="/a.sif", account="P"))
    assert (plan.partition.name, plan.gpus_per_node, plan.tasks_per_node, plan.cpus_per_task) == ("gp1d", 8, 1, 32)
    ddp = plan_launch(load_site("twnia2"), LaunchRequest(command=("x",), image="/a.sif", account="P", framework="ddp"))
    assert (ddp.gpus_per_node, ddp.tasks_per_node, ddp.cpus_per_task) == (8, 8, 4)
    neuron = plan_launch(load_site("neuron"), LaunchRequest(command=("x",), comment="python", runtime="none",
                                                            framework="mpi"))
    assert (neuron.gpus_per_node, neuron.tasks_per_node, neuron.cpus_per_task) == (4, 4, 10)


# --- safety -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["name", "account", "comment", "partition"])
@pytest.mark.parametrize("value", ["a b", "x;rm", "$(id)", "`id`", "a\nb", "ab\n", "*", "a'b"])
def test_sbatch_line_values_are_rejected(field, value):
    with pytest.raises(ConfigError):
        plan_launch(load_site("local"), LaunchRequest(command=("x",), **{field: value}))


@pytest.mark.parametrize("mount", ["rel:/x", "/a,b:/x", "/a:/b:rx", "/a\n:/b"])
def test_bad_mounts_and_env_names_are_rejected(mount):
    with pytest.raises(ConfigError):
        plan_launch(load_site("local"), LaunchRequest(command=("x",), mounts=(mount,)))
    with pytest.raises(ConfigError):
        plan_launch(load_site("local"), LaunchRequest(command=("x",), env=(("A B", "1"),)))


def test_same_inputs_same_bytes():
    site, request = SEED_REQUESTS["002-oci-tf"]
    assert render_sbatch(plan_launch(load_site(site), request)) == render_sbatch(plan_launch(load_site(site), request))


def test_shell_helpers():
    assert expand_quote('/mnt/home/$USER/"x"`y`$(z)') == '"/mnt/home/${USER}/\\"x\\"\\`y\\`\\$(z)"'
    assert pyxis_ref("nvcr.io/nvidia/pytorch:24.06-py3") == "nvcr.io#nvidia/pytorch:24.06-py3"
    assert pyxis_ref("127.0.0.1:5000/ckit/x:1") == "127.0.0.1:5000#ckit/x:1"
    assert pyxis_ref("ubuntu:22.04") == "ubuntu:22.04"
    assert [time_minutes(t) for t in ("30", "00:10:00", "2-00:00:00", "1:30")] == [30, 10, 2880, 2]


# --- nccl-tests report (seed 002's tables) --------------------------------------------------------------------------

def test_nccl_report_one_and_two_nodes():
    one = parse(all_reduce_1node())
    two = parse(all_reduce_2nodes())
    assert (one.avg_busbw, one.ranks, len(one.hosts)) == (232.915, 8, 1)
    assert (two.avg_busbw, two.ranks, len(two.hosts)) == (164.643, 16, 2)
    assert two.rows[0].size_bytes == 10737418240 and two.peak_busbw == 165.21
    assert json.loads(json.dumps(two.as_json()))["devices"] == ["NVIDIA A100-SXM4-40GB"]
    assert re.search(r"average bus bandwidth: 164\.643 GB/s", two.text())


def test_nccl_report_rejects_other_text():
    with pytest.raises(ConfigError):
        parse("hello\n")


def test_combinations_ckit_cannot_run_are_refused():
    with pytest.raises(ConfigError, match="cannot start containers on the other 1 node"):
        plan_launch(load_site("oci"), LaunchRequest(command=("x",), image="nvcr.io/a/b:1", framework="horovod",
                                                    launcher="horovodrun", nodes=2))
    with pytest.raises(ConfigError, match="legacy"):
        render_dlws(plan_launch(load_site("apulis"), LaunchRequest(command=("x",), image="a/b:1",
                                                                   framework="mindspore", rank_table="v1")))
    with pytest.raises(ConfigError, match="podman runs image references"):
        plan_launch(load_site("local"), LaunchRequest(command=("x",), image="/a.sif"))
    with pytest.raises(ConfigError, match="no runtime 'pyxis'"):
        plan_launch(load_site("local"), LaunchRequest(command=("x",), image="a/b:1", runtime="pyxis"))


def test_neuron_submit_from_scratch(monkeypatch):
    from buildkit.launch.rules import submit_from_violation

    monkeypatch.setenv("USER", "kim")
    neuron = load_site("neuron")
    assert submit_from_violation(neuron, Path("/scratch/kim/run1")) is None
    error = submit_from_violation(neuron, Path("/home01/kim"))
    assert error is not None and error.exit_code == 2
    assert "neuron accepts jobs only from /scratch/$USER, not /home01/kim" in error.message
    assert submit_from_violation(load_site("oci"), Path("/anywhere")) is None


def test_seed003_rank_table_is_a_valid_legacy_table():
    """The validator accepts the seed's own hand-written table (2 servers x 8 NPUs) and rejects a broken one."""
    from buildkit.launch.frameworks.mindspore import legacy_rank_table_problems

    table = json.loads(hccl_rank_table())
    assert legacy_rank_table_problems(table, servers=2, devices=8) == []
    table["group_list"][0]["instance_list"][3]["rank_id"] = "9"
    assert legacy_rank_table_problems(table, servers=2, devices=8) == ["rank_id must run 0..15"]
