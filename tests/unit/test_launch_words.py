"""The words a user hands a job (launch/words.py) and the rule that every option is honoured or refused (pure)."""

from __future__ import annotations

import dataclasses
import re
from functools import cache

import pytest

from buildkit.errors import CkitError, ConfigError
from buildkit.launch import frameworks
from buildkit.launch.plan import FLAGS, LaunchRequest, plan_launch
from buildkit.launch.schedulers.dlws import render_dlws
from buildkit.launch.schedulers.slurm import render_sbatch, render_shell
from buildkit.launch.steps import command_words
from buildkit.launch.words import Ref, literal
from buildkit.launch.words import parse as parse_in
from buildkit.site import load_site as _load_site
from buildkit.site.model import Site


@cache
def load_site(name: str) -> Site:
    return _load_site(name)


# --- the grammar ----------------------------------------------------------------------------------------------------

def variables(framework: str = "ddp", **request: object):
    return plan_launch(load_site("local"), LaunchRequest(command=("x",), framework=framework,
                                                         **request)).variables  # type: ignore[arg-type]


def parse(text: str, what: str, framework: str = "ddp", **request: object):
    return parse_in(text, what, variables(framework, **request))


@pytest.mark.parametrize(("text", "parts"), [
    ("tcp://$MASTER_ADDR:$MASTER_PORT", ("tcp://", Ref("MASTER_ADDR"), ":", Ref("MASTER_PORT"))),
    ("/home01/${USER}/.local/bin:$PATH", ("/home01/", Ref("USER"), "/.local/bin:", Ref("PATH"))),
    ("${SLURM_PROCID}x", (Ref("SLURM_PROCID"), "x")),
    ("~/checkpoints/", (Ref("HOME", tilde=True), "/checkpoints/")),
    ("a~/b ~", ("a~/b ~",)),
    ("price$$5 $$(date) `id` * 'q' \"d\"", ("price$5 $(date) `id` * 'q' \"d\"",)),
    ("$~/x", ("~/x",)),
    ("$RANKS $MASTER_ADDRx ${RANK}x", ("$RANKS $MASTER_ADDRx ", Ref("RANK"), "x")),
])
def test_parse(text, parts):
    assert parse(text, "x") == parts


@pytest.mark.parametrize("text", [
    "for f in a b; do echo \"v=$f\"; done", "{print $1}", "cd /x && echo $(pwd)", "${X:-default}", "$?", "a$",
    "$ b", "${}", "`id`", "${RANK:-0}", "$@", "$#", "${f}",
])
def test_every_dollar_that_names_no_job_variable_reaches_the_program_as_written(text):
    assert parse(text, "--env X") == (text,)


@pytest.mark.parametrize(("text", "framework", "who", "options"), [
    ("tcp://$MASTER_ADDR:$MASTER_PORT", "none", "--framework ddp or --framework mindspore --launcher msrun", {}),
    ("${RANK}", "tf", "--framework ddp", {}),
    ("$NODE_RANK", "ddp", "--framework ddp --launcher srun", {"launcher": "torchrun"}),
    ("$SLURM_ARRAY_TASK_ID", "none", "--array", {}),
    ("$DLWS_JOB_ID", "none", "a dlws site's scheduler", {}),
])
def test_a_variable_only_other_jobs_define_is_refused_with_what_defines_it(text, framework, who, options):
    with pytest.raises(ConfigError) as err:
        parse(text, "argument 2 of the command", framework, **options)
    assert str(err.value).startswith(f"argument 2 of the command {text!r}: $") and f"is set by {who}," in str(err.value)
    name = re.search(r"\$\{?(\w+)", text).group(1)
    assert f"--env {name}=VALUE" in (err.value.hint or "") and f"$${name}" in (err.value.hint or "")


def test_the_job_defines_its_env_names_its_array_and_its_scheduler_variables():
    assert parse("$MASTER_PORT $SLURM_ARRAY_TASK_ID $SLURM_PROCID", "x", "none", env=(("MASTER_PORT", "1"),),
                 array="0-3") == (Ref("MASTER_PORT"), " ", Ref("SLURM_ARRAY_TASK_ID"), " ", Ref("SLURM_PROCID"))
    assert parse("$$MASTER_PORT", "x", "none") == ("$MASTER_PORT",)
    # the node a task runs on is Slurm's too (ckit doctor's two-node check names it)
    assert parse("node=$SLURMD_NODENAME", "x", "none") == ("node=", Ref("SLURMD_NODENAME"))


@pytest.mark.parametrize("text", ["$(touch x)", "${HOME}", "~/x", "~", "a$$b", "`id` * ? 'x' \"y\"", "$~", ""])
def test_literal_reaches_the_program_as_it_is(text):
    parts = parse(literal(text), "x")
    assert "".join(p for p in parts if isinstance(p, str)) == text and not any(isinstance(p, Ref) for p in parts)


def test_a_command_without_job_variables_stays_as_written():
    ddp = variables()
    assert command_words(["python", "x.py", "--lr", "0.1"], ddp) == ["python", "x.py", "--lr", "0.1"]
    assert command_words(["echo", "$$HOME"], ddp) == ["echo", "'$HOME'"]
    assert command_words(["awk", "{print $1}", "f"], ddp) == ["awk", "'{print $1}'", "f"]
    assert command_words(["python", "main.py", "--rank", "$NODE_RANK"], ddp) == [
        "sh", "-c", "'set -- python main.py --rank \"${NODE_RANK}\"; exec \"$@\"'", "ckit-args"]


def test_a_shell_script_keeps_its_own_variables_next_to_the_job_ones():
    """The script's $f is escaped in ckit's double-quoted word, so only its shell reads it; $SLURM_PROCID is
    filled in per task."""
    words = command_words(["sh", "-c", 'for f in a b; do echo "v=$f $SLURM_PROCID"; done'], variables("none"))
    assert words[2] == """'set -- sh -c "for f in a b; do echo \\"v=\\$f ${SLURM_PROCID}\\"; done"; exec "$@"'"""


def test_env_values_are_set_per_task_and_literal_ones_exported():
    """Guide 001's PATH line: the batch shell keeps its PATH; each task prepends to the PATH it starts with."""
    script = render_sbatch(plan_launch(load_site("local"), LaunchRequest(
        command=("ray", "start"), env=(("PATH", "/home01/${USER}/.local/bin:$PATH"), ("A", "1$$")))))
    assert "export A='1$'" in script and "export PATH" not in script.split("srun")[0]
    assert script.rstrip().endswith("""sh -c 'export PATH="/home01/${USER}/.local/bin:${PATH}"; exec "$@"' """
                                    "ckit-task ray start")


# --- every option honoured or refused -------------------------------------------------------------------------------

# A value for each request field that differs from its default; command, image, framework and runtime choose the
# backends themselves, interactive and fetch change what is run around the script (tests/integration).
VALUES: dict[str, object] = {
    "launcher": None, "rank_table": "legacy", "nodes": 2, "gpus_per_node": 2, "tasks_per_node": 2,
    "cpus_per_task": 3, "mem": "10G", "mem_per_cpu": "4000", "mem_per_gpu": "32G", "time": "00:10:00", "partition": "cas_v100_2", "account": "p1", "comment": "python",
    "name": "other", "env": (("A", "1"),), "mounts": ("/a:/b",), "gloo": True, "network_interface": "ib1",
    "devices_per_node": 2, "workdir": "/w", "modules": ("m/1",), "conda": "c", "venv": "/v", "pre": ("echo hi",),
    "output": "o.out", "error": "e.err", "mail_type": "END", "mail_user": "a@example.org", "keep_container": True,
    "mpi": "pmix", "array": "0-3", "after": ("12",), "endpoints": ("ssh",),
}
STRUCTURAL = {"command", "image", "framework", "runtime", "interactive", "fetch", "code"}


def test_the_matrix_names_every_option():
    fields = {f.name for f in dataclasses.fields(LaunchRequest)}
    assert fields == set(VALUES) | STRUCTURAL and set(FLAGS) == fields - {"command", "framework"}


def _outcome(site: str, base: dict[str, object], name: str, value: object) -> str:
    """``refused`` (exit 2), else the job's text (the sbatch script or the Apulis form and command)."""
    try:
        plan = plan_launch(load_site(site), LaunchRequest(**{**base, name: value}))  # type: ignore[arg-type]
    except CkitError as err:
        assert err.exit_code == 2, err
        return "refused"
    return render_dlws(plan).text() if site == "apulis" else render_sbatch(plan)


@pytest.mark.parametrize("framework", frameworks.REGISTRY.names())
def test_every_option_changes_the_slurm_job_or_is_refused(framework):
    base = {"command": ("python", "x.py"), "framework": framework, "comment": "etc", "runtime": "none"}
    launchers = frameworks.REGISTRY.get(framework, "").launchers
    before = _outcome("neuron", base, "name", "ckit")
    assert before != "refused"
    dropped = [FLAGS[name] for name, value in VALUES.items() if _outcome(
        "neuron", base, name, (launchers[-1] if len(launchers) > 1 else "srun") if name == "launcher" else value)
        == before]
    assert not dropped, f"dropped for --framework {framework}: {dropped}"


@pytest.mark.parametrize("framework", ["none", "horovod", "mindspore"])
def test_every_option_changes_the_apulis_job_or_is_refused(framework):
    base = {"command": ("python", "x.py"), "framework": framework, "image": "a/b:1"}
    before = _outcome("apulis", base, "name", "ckit")
    assert before != "refused"
    values = {**VALUES, "launcher": "srun", "rank_table": "v1"}  # legacy is apulis's own
    dropped = [FLAGS[name] for name, value in values.items() if _outcome("apulis", base, name, value) == before]
    assert not dropped, f"dropped on apulis with --framework {framework}: {dropped}"


def test_apulis_says_what_to_do_instead():
    with pytest.raises(ConfigError) as err:
        plan_launch(load_site("apulis"), LaunchRequest(command=("x",), image="a/b:1", partition="p", mounts=("/a:/b",),
                                                       modules=("m",), conda="c", time="1:00:00", account="A"))
    text = str(err.value)
    assert text.startswith("6 options cannot be honoured:")
    for line in ("-p/--partition: apulis (dlws) cannot honour it; the form has no partitions",
                 "--module: apulis (dlws) cannot honour it; the job runs in its Docker image",
                 "--conda: apulis (dlws) cannot honour it; activate it in the Command: --pre 'source activate ENV'"):
        assert line in text


def test_apulis_honours_env_workdir_and_endpoints():
    job = render_dlws(plan_launch(load_site("apulis"), LaunchRequest(
        command=("python", "t.py", "~/tensorboard/${DLWS_JOB_ID}/logs/"), image="a/b:1", framework="horovod",
        env=(("PYTHONPATH", "$PYTHONPATH:/code"), ("MODE", "x y")), workdir="/code", pre=("cd ~",),
        endpoints=("ssh", "tensorboard"))))
    assert job.command.startswith("""export MODE='x y' && export PYTHONPATH="${PYTHONPATH}:/code" && cd /code && cd ~ && """)
    assert job.command.endswith('python t.py ~/"tensorboard/${DLWS_JOB_ID}/logs/" && sleep infinity')
    assert ("Endpoints (tick)", "SSH, TensorBoard") in job.form and "ENDPOINTS tab" in job.text()


def test_interactive_salloc_has_the_framework_variables_and_a_terminal_on_the_first_node():
    plan = plan_launch(load_site("neuron"), LaunchRequest(
        command=("bash",), framework="horovod", launcher="horovodrun", nodes=2, gpus_per_node=2, comment="etc",
        runtime="none", modules=("python/3.7.1",), conda="my_tensorflow", interactive=True))
    options, text = render_shell(plan)
    assert "--nodes=2" in options and "--comment=etc" in options and not any(o.startswith("--output") for o in options)
    assert "module load python/3.7.1" in text and "conda activate my_tensorflow" in text
    assert 'export CKIT_HOSTS="${CKIT_HOSTS%,}"' in text
    assert text.rstrip().endswith("srun --pty --overlap --export=ALL --nodes=1 --ntasks=1 bash")


def test_the_code_folder_is_the_jobs_own_variable_with_code_only(tmp_path):
    from buildkit.launch.plan import LaunchRequest, job_variables
    from buildkit.site import load_site

    site = load_site("local")
    with_code = job_variables(site, LaunchRequest(command=("sh",), code=str(tmp_path)), "none", None)
    assert parse_in("${CKIT_CODE}/main.sh", "x", with_code) == (Ref("CKIT_CODE"), "/main.sh")
    without = job_variables(site, LaunchRequest(command=("sh",)), "none", None)
    assert parse_in("${CKIT_CODE}/main.sh", "x", without) == ("${CKIT_CODE}/main.sh",)  # the program's own text
