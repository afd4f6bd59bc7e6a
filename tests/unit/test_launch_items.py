"""Issue 9's items on the plan and the scripts (pure): each test failed before its fix."""

from __future__ import annotations

import pytest

from buildkit.errors import ConfigError
from buildkit.launch import frameworks, runtimes, schedulers
from buildkit.launch.plan import ImageFacts, LaunchRequest, plan_launch
from buildkit.launch.schedulers.dlws import platform_word, render_dlws
from buildkit.launch.schedulers.slurm import render_sbatch
from buildkit.site import load_site


def _script(site: str, **kw: object) -> str:
    return render_sbatch(plan_launch(load_site(site), LaunchRequest(**{"command": ("python", "x.py"), **kw})))


def _srun_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.lstrip().startswith("srun ") or " srun " in line]


# 2. pyxis containers follow the image and are removed unless kept -----------------------------------------------
def test_pyxis_container_is_per_job_and_removed_at_the_end():
    script = _script("oci", image="/mnt/home/u/a.sqsh")
    assert 'ckit_container="ckit-${SLURM_JOB_ID}"' in script and "trap ckit_remove_container EXIT" in script
    assert 'ckit-remove "pyxis_${ckit_container}" || true' in script and 'enroot remove --force "$1"' in script
    assert "ckit: warning: container $1 is left on $(hostname)" in script  # a node that keeps it says so
    assert '--container-name="${ckit_container}"' in script
    assert "export ENROOT_LOGIN_SHELL=no" in script  # the image's PATH reaches the program


def test_kept_pyxis_container_is_named_after_the_file_or_the_digest():
    kept = _script("oci", image="/mnt/home/u/a.sqsh", keep_container=True)
    assert "stat -L -c '%n %s %Y %i' \"${CKIT_IMAGE}\" | sha256sum" in kept and "enroot remove" not in kept
    plan = plan_launch(load_site("oci"), LaunchRequest(command=("x",), image="nvcr.io/nvidia/x:1", keep_container=True))
    assert any("a moved tag is not noticed" in w for w in plan.warnings)
    with pytest.raises(ConfigError, match="--keep-container"):
        plan_launch(load_site("local"), LaunchRequest(command=("x",), image="localhost/a:1", keep_container=True))


# 3. --export=NONE: every srun passes the script's environment ---------------------------------------------------
@pytest.mark.parametrize("framework", [b.name for b in frameworks.REGISTRY.all()])
def test_every_srun_exports_all(framework):
    kw = {"devices_per_node": 2} if framework == "mindspore" else {}
    lines = _srun_lines(_script("local", framework=framework, **kw))
    assert lines and all(" --export=ALL " in line.split(" -- ")[0] for line in lines)


# 4. USER unset under set -u -------------------------------------------------------------------------------------
def test_user_falls_back_to_slurm_job_user():
    script = _script("oci", image="nvcr.io/nvidia/x:1")
    assert script.index('export USER="${USER:-${SLURM_JOB_USER}}"') < script.index("${USER}:/mnt/home")
    assert "SLURM_JOB_USER" not in _script("local")


# 5. torchrun runs the command as given ---------------------------------------------------------------------------
def test_torchrun_does_not_put_python_before_the_command():
    script = _script("local", framework="ddp", launcher="torchrun")
    assert "exec torchrun --no_python " in script and script.rstrip().endswith("ckit-task python x.py")


# 6. tasks start in the submit folder; --workdir changes it ---------------------------------------------------------
def test_every_runtime_starts_in_the_submit_folder():
    pyxis = _script("oci", image="nvcr.io/nvidia/x:1")
    assert '--container-workdir="${SLURM_SUBMIT_DIR}"' in pyxis and ',${SLURM_SUBMIT_DIR}:${SLURM_SUBMIT_DIR}"' in pyxis
    podman = _script("local", image="localhost/a:1", runtime="podman")
    assert '--volume "${SLURM_SUBMIT_DIR}:${SLURM_SUBMIT_DIR}" --workdir "${SLURM_SUBMIT_DIR}"' in podman
    assert "--container-workdir=/code" in _script("oci", image="nvcr.io/nvidia/x:1", workdir="/code")
    assert "--pwd /code" in _script("twnia2", image="/a.sif", account="P", workdir="/code")
    assert "srun --kill-on-bad-exit=1 --export=ALL --chdir=/code python x.py" in _script("local", workdir="/code")
    with pytest.raises(ConfigError, match="--workdir"):
        _script("local", workdir="rel")


def test_mindspore_processes_find_the_code_in_their_folders():
    script = _script("local", framework="mindspore", devices_per_node=2)
    assert 'ln -sfn "$entry" "$dir/"' in script and '(cd "$dir" && env > env.log && exec "$@") &' in script
    assert "sh -c 'pids=" not in script  # a plain loop in a file, not a one-line sh -c


# 7. modules, conda, venv ------------------------------------------------------------------------------------------
def test_modules_conda_and_venv_lines():
    script = _script("local", modules=("gcc/10.2.0", "cuda/11.4"), venv="/opt/venvs/a b")
    assert "module purge\nmodule load gcc/10.2.0 cuda/11.4\n" in script
    assert ". '/opt/venvs/a b'/bin/activate\nset -u\n" in script
    conda = _script("local", conda="my_tensorflow")
    assert 'eval "$("${ckit_conda}" shell.bash hook 2>/dev/null)"' in conda
    assert 'if [ "$(type -t conda)" = function ]; then conda activate my_tensorflow\n' in conda
    with pytest.raises(ConfigError, match="does not reach inside"):
        _script("local", image="localhost/a:1", runtime="podman", venv="/v")
    with pytest.raises(ConfigError, match="--module"):
        _script("local", modules=("a b",))


# 8. runtime and artifact must match -------------------------------------------------------------------------------
def test_pyxis_refuses_a_sif():
    with pytest.raises(ConfigError, match=r"--runtime pyxis cannot run /x/a.sif") as err:
        plan_launch(load_site("oci"), LaunchRequest(command=("x",), image="/x/a.sif"))
    assert err.value.exit_code == 2 and "--to sqsh" in (err.value.hint or "")


def test_twnia2_refuses_a_zstd_image_read_on_this_machine():
    with pytest.raises(ConfigError, match="zstd-compressed; twnia2's kernel mounts only gzip, xz, lzo") as err:
        plan_launch(load_site("twnia2"), LaunchRequest(command=("x",), image="/a.sif", account="P"),
                    ImageFacts(compression="zstd"))
    assert "--site twnia2" in (err.value.hint or "")
    plan_launch(load_site("twnia2"), LaunchRequest(command=("x",), image="/a.sif", account="P"),
                ImageFacts(compression="gzip"))


def test_apulis_refuses_a_local_file_as_docker_image():
    with pytest.raises(ConfigError, match="takes a registry image, not the file /x/a.sif"):
        plan_launch(load_site("apulis"), LaunchRequest(command=("x",), image="/x/a.sif"))


# 9. apulis --------------------------------------------------------------------------------------------------------
def test_platform_words_expand_on_the_platform_only():
    apulis = plan_launch(load_site("apulis"), LaunchRequest(command=("x",), image="a/b:1")).variables
    assert platform_word("~/tensorboard/${DLWS_JOB_ID}/logs/", apulis) == '~/"tensorboard/${DLWS_JOB_ID}/logs/"'
    assert platform_word("~/checkpoints/", apulis) == "~/checkpoints/"
    assert platform_word("$$(touch x)", apulis) == "'$(touch x)'"  # $$: a literal $
    assert platform_word("$HOME/$(id)", apulis) == '"${HOME}/\\$(id)"'  # the platform's shell never runs $(id)
    with pytest.raises(ConfigError, match=r"\$SLURM_PROCID is set by a slurm site's scheduler"):
        platform_word("$SLURM_PROCID", apulis)


def test_apulis_defaults_to_the_legacy_rank_table():
    job = render_dlws(plan_launch(load_site("apulis"), LaunchRequest(command=("python", "t.py"), image="a/b:1",
                                                                     framework="mindspore", devices_per_node=8)))
    assert job.files and "hccl_ms.json" in job.files[0][1]


# 10. only what a guide or a verified source shows --------------------------------------------------------------------
def test_twnia2_and_tara_get_no_mpi_plugin():
    assert "--mpi" not in _script("twnia2", image="/a.sif", account="P", framework="horovod")
    assert "--mpi" not in _script("tara", runtime="none", account="P", framework="horovod")
    assert "srun --kill-on-bad-exit=1 --export=ALL --mpi=pmix " in _script("local", framework="mpi", mpi="pmix")


# 12. mail and a separate error log ----------------------------------------------------------------------------------
def test_mail_and_error_log_and_log_name():
    script = _script("local", mail_type="END,FAIL", mail_user="a@example.org", output="%x.o%j", error="%x.e%j")
    for line in ("#SBATCH --mail-type=END,FAIL", "#SBATCH --mail-user=a@example.org", "#SBATCH --output=%x.o%j",
                 "#SBATCH --error=%x.e%j"):
        assert line in script
    with pytest.raises(ConfigError):
        _script("local", mail_type="SOMETIMES")
    with pytest.raises(ConfigError):
        _script("local", output="a b")


# shape: backends by name -------------------------------------------------------------------------------------------
def test_backends_are_registered_by_name():
    assert set(runtimes.REGISTRY.names()) == {"singularity", "apptainer", "pyxis", "charliecloud", "podman", "none"}
    assert set(frameworks.REGISTRY.names()) == {"none", "ddp", "horovod", "tf", "mindspore", "ray", "nccl-tests",
                                                "mpi"}
    assert set(schedulers.REGISTRY.names()) == {"slurm", "dlws"}
    with pytest.raises(ConfigError, match="did you mean 'ddp'"):
        plan_launch(load_site("local"), LaunchRequest(command=("x",), framework="dpp"))
