"""What the guides' users write in their scripts, run by ``ckit launch`` on the local Slurm (partition ``multi``:
two namespaced nodes n1 and n2, whose network reaches nothing but each other): variables in arguments and
``--env`` read per task, the guides' log folders, conda without a login shell, Ray's NERSC variables, ``--mpi``
with a plain command, arrays and dependencies, an interactive allocation on two nodes, and, with the real
Apptainer (the sites' `singularity` module), the image's ENTRYPOINT, horovodrun in the image and ``--fetch`` for nodes without internet.

Stand-ins only where the real thing is not here: conda (no Debian or PyPI package: a script that answers
``conda shell.bash hook`` and ``conda activate`` as conda does) and horovodrun inside the busybox image (Horovod
is built only into a host venv, not into an image).
"""

from __future__ import annotations

import http.server
import io
import json
import os
import shutil
import sys
import tarfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from buildkit.cli import main
from buildkit.launch.plan import LaunchRequest, plan_launch
from buildkit.launch.words import parse, sh_word
from buildkit.process import run
from buildkit.site import load_site
from tests.infra.containers import remove_images
from tests.integration.singularity_helpers import module_folder, site_for_this_machine
from tests.integration.test_launch_jobs import _in_a_pty

JOBS = Path(__file__).parent / "jobs"


def _results(text: str) -> list[dict[str, Any]]:
    found = [json.loads(line.split("CKIT-RESULT ", 1)[1]) for line in text.splitlines() if "CKIT-RESULT " in line]
    return sorted(found, key=lambda r: (r.get("rank", 0), r.get("index", 0)))


def _launch(folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str,
            site: str = "local", program: str | None = None, wait: bool = True) -> tuple[int, dict[str, Any]]:
    """``ckit launch --site SITE -J g … --submit [--wait] --json`` from ``folder``; rc and the JSON result."""
    if program:
        shutil.copy(JOBS / program, folder / program)
    monkeypatch.chdir(folder)
    capsys.readouterr()
    rc = main(["launch", "--json", "--site", site, "-J", "g", "--submit", *(["--wait"] if wait else []), *args])
    out = capsys.readouterr()
    assert out.out.startswith("{"), out.err
    return rc, json.loads(out.out)


def _log(folder: Path, data: dict[str, Any]) -> str:
    return (folder / f"g-{data['job_id']}.out").read_text(errors="replace")


# --- variables in arguments and --env (seed 001's DDP loop, its PATH line) --------------------------------------------

def test_words_are_read_back_by_bash_as_written(tmp_path):
    """Each word as the task's shell reads it: the variables' values, nothing evaluated, split or globbed."""
    (tmp_path / "a file").write_text("")
    args = ["--dist-url", "tcp://$MASTER_ADDR:$MASTER_PORT", "--rank", "$NODE_RANK", "$$(touch pwned) `touch x` *",
            "$SPACES", "~/ckpt", "it's \"q\""]
    ddp = plan_launch(load_site("local"), LaunchRequest(command=("x",), framework="ddp",
                                                        env=(("SPACES", "1"),))).variables
    script = "exec printf '<%s>\\n' " + " ".join(sh_word(parse(a, "x", ddp)) for a in args)
    env = {"MASTER_ADDR": "n1", "MASTER_PORT": "15003", "NODE_RANK": "1", "SPACES": "a  *  b", "HOME": "/h",
           "PATH": "/usr/bin:/bin"}
    out = run(["bash", "-c", script], env=env, cwd=tmp_path).stdout
    assert out.splitlines() == ["<--dist-url>", "<tcp://n1:15003>", "<--rank>", "<1>",
                                "<$(touch pwned) `touch x` *>", "<a  *  b>", "</h/ckpt>", "<it's \"q\">"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a file"]


def test_the_guides_ddp_arguments_and_path_line_per_task(slurm, frameworks, tmp_path, monkeypatch, capsys):
    """Seed 001: ``--dist-url tcp://$master_addr:$master_port … --world-size $SLURM_JOB_NUM_NODES --rank
    $node_rank`` and ``export PATH=/home01/${USER}/.local/bin:$PATH``, each task its own values."""
    user = os.environ.get("USER") or "root"
    tool = tmp_path / user / ".local" / "bin" / "ckit-guide-tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho tool\n")
    tool.chmod(0o755)
    rc, data = _launch(tmp_path, monkeypatch, capsys, "-p", "multi", "-N", "2", "--ntasks-per-node", "1",
                       "--runtime", "none", "--venv", str(frameworks.path), "--framework", "ddp",
                       "--env", f"PATH={tmp_path}/${{USER}}/.local/bin:$PATH", "--",
                       "python", "guide_ddp_main.py", "-a", "resnet18", "--dist-url", "tcp://$MASTER_ADDR:$MASTER_PORT",
                       "--dist-backend", "nccl", "--multiprocessing-distributed",
                       "--world-size", "$SLURM_JOB_NUM_NODES", "--rank", "$NODE_RANK", program="guide_ddp_main.py")
    text = _log(tmp_path, data)
    assert rc == 0, text
    results = _results(text)
    port = 15000 + int(data["job_id"]) % 15000
    assert [(r["rank"], r["world"], r["host"]) for r in results] == [(0, 2, "n1"), (1, 2, "n2")], text
    assert {r["dist_url"] for r in results} == {f"tcp://n1:{port}"} and {r["allreduce"] for r in results} == {3.0}
    assert {r["tool"] for r in results} == {str(tool)} and {r["path_head"] for r in results} == {str(tool.parent)}


def test_a_plain_command_with_mpi_is_one_world(slurm, frameworks, tmp_path, monkeypatch, capsys):
    """--mpi with --framework none starts MPI ranks (it was dropped: two worlds of one)."""
    rc, data = _launch(tmp_path, monkeypatch, capsys, "-p", "multi", "-N", "2", "--runtime", "none",
                       "--venv", str(frameworks.path), "--mpi", "pmix", "--", "python", "mpi_check.py",
                       program="mpi_check.py")
    text = _log(tmp_path, data)
    assert rc == 0, text
    assert [(r["rank"], r["world"], r["allreduce"]) for r in _results(text)] == [(0, 2, 3), (1, 2, 3)], text


# --- the guides' logs, conda, Ray ---------------------------------------------------------------------------------------

def test_the_guides_log_folder_is_made(slurm, tmp_path, monkeypatch, capsys):
    """Seed 001's ``#SBATCH -o ./out/%x.o%j -e ./out/%x.e%j``: Slurm would not create ./out."""
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["launch", "--json", "--site", "local", "-J", "tf_multi_test", "-o", "./out/%x.o%j",
                 "-e", "./out/%x.e%j", "--submit", "--wait", "--", "sh", "-c", "echo to-out; echo to-err >&2"]) == 0
    job = json.loads(capsys.readouterr().out)["job_id"]
    assert (tmp_path / "out" / f"tf_multi_test.o{job}").read_text() == "to-out\n"
    assert (tmp_path / "out" / f"tf_multi_test.e{job}").read_text() == "to-err\n"


CONDA = """#!/bin/bash
# A stand-in for conda (packaged neither for Debian nor on PyPI): `shell.bash hook` prints the shell function,
# whose `activate ENV` puts ENV's bin first on PATH, as conda's does.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$1 $2" != "shell.bash hook" ]; then echo "conda stand-in: $*" >&2; exit 2; fi
cat <<EOF
conda() {
  if [ "\\$1" = activate ]; then
    export CONDA_PREFIX="$root/envs/\\$2" CONDA_DEFAULT_ENV="\\$2" PATH="$root/envs/\\$2/bin:\\$PATH"
  else "$root/bin/conda" "\\$@"; fi
}
EOF
"""
CONDA_CHECK = ('import json, os, shutil, socket; print("CKIT-RESULT " + json.dumps({"env": os.environ.get('
               '"CONDA_DEFAULT_ENV"), "python": shutil.which("python"), "host": socket.gethostname()}))')


@pytest.mark.parametrize("how", ["module", "CONDA_EXE"])
def test_conda_without_a_login_shell(slurm, tmp_path, monkeypatch, capsys, how):
    """The guides' ``source activate ENV`` after a module, or ``#!/bin/bash -l``: ``--conda ENV`` finds conda on
    the PATH a module gives, or at $CONDA_EXE (before: ``conda: command not found``, exit 127)."""
    root = tmp_path / "anaconda3"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "conda").write_text(CONDA)
    (root / "bin" / "conda").chmod(0o755)
    (root / "envs" / "my_tensorflow" / "bin").mkdir(parents=True)
    (root / "envs" / "my_tensorflow" / "bin" / "python").symlink_to(sys.executable)
    modules = tmp_path / "modulefiles" / "python"
    modules.mkdir(parents=True)
    (modules / "3.7.1.lua").write_text(f'prepend_path("PATH", "{root}/bin")\n')
    finds = (["--env", f"MODULEPATH={modules.parent}", "--module", "python/3.7.1"] if how == "module"
             else ["--env", f"CONDA_EXE={root}/bin/conda"])
    rc, data = _launch(tmp_path, monkeypatch, capsys, "-p", "multi", "-N", "2", "--runtime", "none", *finds,
                       "--conda", "my_tensorflow", "--", "python", "-c", CONDA_CHECK)
    text = _log(tmp_path, data)
    assert rc == 0, text
    assert [(r["env"], r["python"]) for r in _results(text)] == \
        [("my_tensorflow", str(root / "envs" / "my_tensorflow" / "bin" / "python"))] * 2, text


def test_conda_nowhere_says_where_it_looked(slurm, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
    rc, data = _launch(tmp_path, monkeypatch, capsys, "--runtime", "none", "--conda", "x", "--", "true")
    assert rc == 127 and "ckit: --conda: no conda here" in _log(tmp_path, data)


def test_ray_has_the_variables_of_the_guides_scripts(slurm, frameworks, tmp_path, monkeypatch, capsys):
    """Seed 001's tune driver: ``ray.init(address='auto', _node_ip_address=os.environ["ip_head"].split(":")[0],
    _redis_password=os.environ["redis_password"])``."""
    rc, data = _launch(tmp_path, monkeypatch, capsys, "-p", "multi", "-N", "2", "--runtime", "none",
                       "--venv", str(frameworks.path), "--framework", "ray", "--", "python", "ray_check.py", "--guide",
                       program="ray_check.py")
    text = _log(tmp_path, data)
    assert rc == 0, text
    (result,) = _results(text)
    assert result["nodes"] == 2 and result["task_hosts"] == ["n1", "n2"] and result["driver"] == "n1", text
    assert result["ip_head"] == f"10.233.0.11:{20000 + int(data['job_id']) % 10000}"
    assert (tmp_path / f"ckit-{data['job_id']}" / "ray_wait.py").is_file()


# --- what they do next: arrays, dependencies, an interactive allocation ------------------------------------------------

def test_an_array_reads_its_index_and_a_dependency_waits(slurm, tmp_path, monkeypatch, capsys):
    rc, first = _launch(tmp_path, monkeypatch, capsys, "--array", "0-2", "--", "sh", "-c",
                        "sleep 1; echo $$1 > done-$$1", "ckit-array", "$SLURM_ARRAY_TASK_ID", wait=False)
    assert rc == 0
    rc, second = _launch(tmp_path, monkeypatch, capsys, "--after", first["job_id"], "--", "sh", "-c",
                         "cat done-0 done-1 done-2")
    text = _log(tmp_path, second)
    assert rc == 0 and text == "0\n1\n2\n", text
    assert "#SBATCH --dependency=afterok:" + first["job_id"] in (tmp_path / "g.sbatch").read_text()


def test_an_interactive_allocation_on_two_nodes(slurm, frameworks, tmp_path):
    """Seed 001's ``salloc --nodes=2 …; module load …; source activate …; horovodrun -H gpu12:2,gpu13:2``:
    a terminal on the first node with the module, the venv and the framework's host list, steps on both nodes."""
    modules = run(["sh", "-c", "echo $MODULEPATH"]).stdout.strip()
    typed = (b'echo "IN $(hostname) $CKIT_TEST_MODULE|$VIRTUAL_ENV|$CKIT_HOSTS"; '
             b"srun --ntasks=2 hostname | sort | tr '\\n' ' '; echo; exit 3\n")
    code, out = _in_a_pty([sys.executable, "-m", "buildkit.cli", "launch", "--site", "local", "-p", "multi", "-N", "2",
                           "--interactive", "--runtime", "none", "--env", f"MODULEPATH={frameworks.modulefiles}:{modules}",
                           "--module", "ckit-test/1.0", "--venv", str(frameworks.path), "--framework", "horovod",
                           "--launcher", "horovodrun"], typed)
    assert f"IN n1 loaded from lmod|{frameworks.path}|n1:1,n2:1" in out and "n1 n2" in out, out
    assert code == 3, out


# --- Singularity: the ENTRYPOINT, horovodrun in the image, --fetch ------------------------------------------------------

ENTRY = """#!/bin/sh
# as NGC's nvidia_entrypoint.sh: set the container up, then run the command as given
export CKIT_ENTRYPOINT_RAN="yes, before $1"
exec "$@"
"""
HOROVODRUN = """#!/bin/sh
# A stand-in for horovodrun that exists only in this image: it says where it runs, then starts -np processes.
np=1; hosts=""
while [ $# -gt 0 ]; do
  case "$1" in
    -np) np="$2"; shift 2 ;;
    -H) hosts="$2"; shift 2 ;;
    --gloo) shift ;;
    --network-interface) shift 2 ;;
    *) break ;;
  esac
done
where=host; [ -d /.singularity.d ] && where=container
echo "HOROVODRUN np=$np hosts=$hosts in=$where on=$(hostname)"
i=0
while [ "$i" -lt "$np" ]; do HOROVOD_RANK=$i "$@" & i=$((i + 1)); done
wait
"""
DOCKERFILE = """FROM {base}
COPY entry.sh /entry.sh
COPY horovodrun /usr/local/bin/horovodrun
ENTRYPOINT ["/entry.sh"]
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with module_folder(tmp_path_factory, "guides") as path:
        yield path


@pytest.fixture(scope="module")
def entry_sif(podman: Any, busybox_image: str, folder: Path) -> Iterator[Path]:
    """busybox with an ENTRYPOINT that sets a variable and execs its arguments, and a stand-in horovodrun, as a
    .sif every singularity 3.x reads (gzip)."""
    import docker

    client = docker.from_env()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, text, mode in [("Dockerfile", DOCKERFILE.format(base=busybox_image), 0o644),
                                 ("entry.sh", ENTRY, 0o755), ("horovodrun", HOROVODRUN, 0o755)]:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(text.encode()), mode
            tar.addfile(info, io.BytesIO(text.encode()))
    context.seek(0)
    ref = f"localhost/ckit-guides/entry:{uuid.uuid4().hex[:8]}"
    client.images.build(fileobj=context, custom_context=True, tag=ref, rm=True)
    sif = folder / "entry.sif"
    try:
        assert main(["-q", "convert", f"docker-daemon:{ref}", "--to", "sif", "--compress", "gzip",
                     "-o", str(sif)]) == 0
        yield sif
    finally:
        remove_images(client, [ref])


@pytest.fixture(scope="module")
def sites(folder: Path, slurm: Any, apptainer: Any) -> Path:
    """twnia2 and tara as this machine runs them (partition multi, Apptainer through their singularity modules)."""
    for name in ("twnia2", "tara"):
        site_for_this_machine(name, folder, slurm.cpus)
    return folder / "sites"


def _singularity_launch(sites: Path, apptainer: Any, where: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str], site: str, *args: str) -> tuple[int, dict[str, Any]]:
    monkeypatch.setenv("CKIT_SITES_PATH", str(sites))
    account = {"twnia2": "P1", "tara": "proj0001"}[site]
    return _launch(where, monkeypatch, capsys, "--account", account, "--env", f"MODULEPATH={apptainer.modulefiles}",
                   *args, site=site)


def test_the_entrypoint_runs_before_the_command(sites, apptainer, entry_sif, tmp_path, monkeypatch, capsys):
    """Seed 000 runs ``singularity run``: the image's ENTRYPOINT first (the program sees what it set); the
    arguments still reach the program as written."""
    tmp_path.chmod(0o755)
    rc, data = _singularity_launch(sites, apptainer, tmp_path, monkeypatch, capsys, "twnia2", "-N", "2",
                                   "--image", str(entry_sif), "--framework", "ddp", "--",
                                   "sh", "-c", 'echo "ENTRY $$0 [$$1] [$$CKIT_ENTRYPOINT_RAN] $$RANK"',
                                   "$$(touch pwned) *", "a b")
    text = _log(tmp_path, data)
    assert rc == 0, text
    lines = sorted(line for line in text.splitlines() if line.startswith("ENTRY "))
    assert lines == [f"ENTRY $(touch pwned) * [a b] [yes, before sh] {rank}" for rank in (0, 1)], text
    assert not list(tmp_path.glob("pwned"))


def test_horovodrun_runs_in_the_image(sites, apptainer, entry_sif, tmp_path, monkeypatch, capsys):
    """twnia2 has Horovod only in its images: horovodrun (a stand-in here) runs in the container, on one node."""
    tmp_path.chmod(0o755)
    rc, data = _singularity_launch(sites, apptainer, tmp_path, monkeypatch, capsys, "twnia2", "--image",
                                   str(entry_sif), "--framework", "horovod", "--launcher", "horovodrun",
                                   "--devices-per-node", "2", "--", "sh", "-c", 'echo "RANK $$HOROVOD_RANK"')
    text = _log(tmp_path, data)
    assert rc == 0, text
    assert "HOROVODRUN np=2 hosts=localhost:2 in=container on=n1" in text, text
    assert sorted(line for line in text.splitlines() if line.startswith("RANK ")) == ["RANK 0", "RANK 1"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture
def dataset_server(tmp_path: Path) -> Iterator[str]:
    """A 'dataset site' on this machine's loopback, which the test nodes (their own network) cannot reach."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "mnist.npz").write_bytes(b"not really mnist\n" * 100)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Quiet(*a, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mnist.npz"
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_downloads_here_for_nodes_without_internet(sites, apptainer, entry_sif, dataset_server, tmp_path,
                                                         monkeypatch, capsys):
    """Seed 004: tara's compute nodes cannot download; the download runs here first, in the image."""
    job_dir = tmp_path / "job"
    job_dir.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    rc, offline = _singularity_launch(sites, apptainer, job_dir, monkeypatch, capsys, "tara", "--image",
                                      str(entry_sif), "--", "wget", "-q", "-T", "3", "-O", "data/mnist.npz",
                                      dataset_server)
    assert rc != 0 and not (job_dir / "data" / "mnist.npz").exists()  # the node cannot reach it
    rc, data = _singularity_launch(sites, apptainer, job_dir, monkeypatch, capsys, "tara", "-N", "2", "--image",
                                   str(entry_sif), "--fetch", f"mkdir -p data && wget -q -O data/mnist.npz {dataset_server}",
                                   "--", "sh", "-c", 'echo "READ $$(hostname) $$(wc -c < data/mnist.npz) $$CKIT_ENTRYPOINT_RAN"')
    text = _log(job_dir, data)
    assert rc == 0, text
    assert sorted(line for line in text.splitlines() if line.startswith("READ ")) == \
        ["READ n1 1700 yes, before sh", "READ n2 1700 yes, before sh"], text
