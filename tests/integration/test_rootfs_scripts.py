"""The generated scripts proven by running them: runscript and env scripts with dash, /etc/rc with bash."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildkit import process
from buildkit.image.model import ImageConfig
from buildkit.image.rootfs import apptainer as A
from buildkit.image.rootfs import enroot as E
from tests.integration.rootfs_helpers import materialize

pytestmark = pytest.mark.integration
SHOW = ("printf", "[%s]\n")  # an ENTRYPOINT that prints its argv, one bracketed line each
TRICKY = ("it's", "", "tab\there", "$HOME `id` $(id)", "a\\b\\", 'q"q', "l1\nl2", "ünï €", " lead", "*", "-n")
ANY_TEXT = st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)))
SLOW_OK = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def shown(*args: str) -> str:
    return "".join(f"[{a}]\n" for a in args)


def run_script(tmp: Path, name: str, text: str, args: tuple[str, ...] = (), *, shell: str = "sh",
               env: dict[str, str] | None = None) -> str:
    path = tmp / name
    path.write_text(text)
    full_env = {"PATH": "/usr/bin:/bin", "HOME": "/home/tester", **(env or {})}
    proc = subprocess.run([shell, str(path), *args], capture_output=True, env=full_env, check=True, cwd=tmp)
    return proc.stdout.decode()


# --- runscript -------------------------------------------------------------------------------------------
RUN_CASES = [
    # (name, config, CLI args, expected output in both modes)
    ("cmd-only", ImageConfig(cmd=(*SHOW, "a b", "c")), (), shown("a b", "c")),
    ("cmd-only+args", ImageConfig(cmd=(*SHOW, "a b")), ("printf", "<%s>", "x y"), "<x y>"),
    ("ep+cmd", ImageConfig(entrypoint=SHOW, cmd=("c1", "c 2")), (), shown("c1", "c 2")),
    ("ep+cmd+args", ImageConfig(entrypoint=SHOW, cmd=("c1",)), ("a", "b c", ""), shown("a", "b c", "")),
    ("ep-only", ImageConfig(entrypoint=(*SHOW, "fixed")), (), shown("fixed")),
    ("ep-only+args", ImageConfig(entrypoint=(*SHOW, "fixed")), ("x", "tab\tnl\nü'"), shown("fixed", "x", "tab\tnl\nü'")),
    ("neither", ImageConfig(), (), ""),
    ("neither+args", ImageConfig(), ("printf", "%s|", "hi", "there"), "hi|there|"),
    ("tricky-image-args", ImageConfig(entrypoint=SHOW, cmd=TRICKY), (), shown(*TRICKY)),
]


@pytest.mark.parametrize("no_eval", ["", "1"], ids=["eval", "no-eval"])
@pytest.mark.parametrize(("name", "config", "args", "expected"), RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_runscript_semantics(tmp_path: Path, name: str, config: ImageConfig, args: tuple[str, ...], expected: str,
                             no_eval: str) -> None:
    env = {"SINGULARITY_NO_EVAL": no_eval} if no_eval else {}
    out = run_script(tmp_path, "runscript", A.runscript(config), args, env=env)
    if name == "neither":
        # apptainer's quirk, kept: with nothing to run, both halves fall through to a bare `set`,
        # which lists the shell variables
        assert "OCI_CMD=''" in out and "SINGULARITY_OCI_RUN=' '" in out
    else:
        assert out == expected


def test_cli_args_are_evaluated_unless_no_eval(tmp_path: Path) -> None:
    config = ImageConfig(entrypoint=SHOW)
    text = A.runscript(config)
    assert run_script(tmp_path, "rs", text, ("$HOME", "`echo hi`")) == shown("/home/tester", "hi")
    assert run_script(tmp_path, "rs", text, ("$HOME", "`echo hi`"), env={"SINGULARITY_NO_EVAL": "1"}) == \
        shown("$HOME", "`echo hi`")


def test_runscript_is_shellcheck_clean(tmp_path: Path) -> None:
    for i, (_, config, _, _) in enumerate(RUN_CASES):
        path = tmp_path / f"runscript{i}"
        path.write_text(A.runscript(config))
        process.run(["shellcheck", "-s", "sh", "-S", "error", path])


@SLOW_OK
@given(args=st.lists(ANY_TEXT, max_size=4))
def test_any_image_cmd_survives_both_runscript_halves(tmp_path: Path, args: list[str]) -> None:
    text = A.runscript(ImageConfig(entrypoint=(*SHOW, "start"), cmd=tuple(args)))
    expected = shown("start", *args)
    assert run_script(tmp_path, "rs", text) == expected
    assert run_script(tmp_path, "rs", text, env={"SINGULARITY_NO_EVAL": "1"}) == expected


@SLOW_OK
@given(args=st.lists(ANY_TEXT, max_size=4))
def test_any_cli_args_survive_no_eval(tmp_path: Path, args: list[str]) -> None:
    text = A.runscript(ImageConfig(entrypoint=SHOW, cmd=("default",)))
    assert run_script(tmp_path, "rs", text, tuple(args), env={"SINGULARITY_NO_EVAL": "1"}) == \
        (shown(*args) if args else shown("default"))


# --- env scripts -----------------------------------------------------------------------------------------
def source_env(tmp: Path, scripts: dict[str, str], names: tuple[str, ...], env: dict[str, str],
               shell: str = "sh") -> dict[str, str]:
    envdir = tmp / "env"
    envdir.mkdir(exist_ok=True)
    for name, text in scripts.items():
        (envdir / name).write_text(text)
    show = " ".join(f'"${{{n}-<unset>}}"' for n in names)
    driver = f'for s in "{envdir}"/*.sh; do . "$s"; done\nprintf "%s\\0" {show}\n'
    out = run_script(tmp, "driver", driver, shell=shell, env=env)
    return dict(zip(names, out.split("\0")[:-1], strict=True))


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_env_script_host_value_wins_except_path(tmp_path: Path, shell: str) -> None:
    config = ImageConfig(env=("PATH=/opt/img/bin:/usr/bin:/bin", "LANG=C.UTF-8", "ONLY_IMAGE=img $x `y` \"z\" \\",
                              "EMPTY=", "NOVALUE", "MULTI=l1\nl2"))
    got = source_env(tmp_path, {"10-docker2singularity.sh": A.docker_env_script(config)},
                     ("PATH", "LANG", "ONLY_IMAGE", "EMPTY", "NOVALUE", "MULTI"),
                     {"LANG": "host-lang", "NOVALUE": "host-nv", "PATH": "/host/bin:/usr/bin:/bin"}, shell)
    assert got == {"PATH": "/opt/img/bin:/usr/bin:/bin", "LANG": "host-lang", "ONLY_IMAGE": 'img $x `y` "z" \\',
                   "EMPTY": "", "NOVALUE": "host-nv", "MULTI": "l1\nl2"}


@SLOW_OK
@given(value=ANY_TEXT, host=st.one_of(st.none(), ANY_TEXT.filter(lambda s: s != "")))
def test_any_env_value_round_trips(tmp_path: Path, value: str, host: str | None) -> None:
    config = ImageConfig(env=(f"VAL={value}",))
    env = {} if host is None else {"VAL": host}
    got = source_env(tmp_path, {"10-docker2singularity.sh": A.docker_env_script(config)}, ("VAL",), env)
    assert got["VAL"] == (value if host is None else host)


def test_whole_env_dir_sources_cleanly(tmp_path: Path) -> None:
    entries = A.entries(ImageConfig(env=("PATH=/img/bin:/bin",)), deffile="bootstrap: docker\n", source_date_epoch=0)
    scripts = {e.path.rsplit("/", 1)[1]: e.data.decode() for e in entries if e.path.startswith("/.singularity.d/env/")}
    assert sorted(scripts) == ["01-base.sh", "10-docker2singularity.sh", "90-environment.sh", "94-appsbase.sh",
                               "95-apps.sh", "99-base.sh", "99-runtimevars.sh"]
    got = source_env(tmp_path, scripts, ("PATH", "LD_LIBRARY_PATH", "PS1"),
                     {"LD_LIBRARY_PATH": "/host/lib", "SING_USER_DEFINED_PREPEND_PATH": "/pre"},
                     shell="bash")  # dash presets PS1 itself
    assert got == {"PATH": "/pre:/img/bin:/bin", "LD_LIBRARY_PATH": "/host/lib:/.singularity.d/libs",
                   "PS1": "Apptainer> "}


def test_fixed_scripts_are_shellcheck_clean(tmp_path: Path) -> None:
    entries = A.entries(ImageConfig(env=("A=1",)), deffile="x", source_date_epoch=0)
    for entry in entries:
        if entry.kind == "file" and entry.mode == 0o755 and entry.data and entry.path != "/.singularity.d/runscript":
            path = tmp_path / entry.path.replace("/", "_")
            path.write_bytes(entry.data)
            process.run(["shellcheck", "-s", "sh", path], step=entry.path)


# --- enroot /etc/rc --------------------------------------------------------------------------------------
def run_rc(tmp: Path, config: ImageConfig, args: tuple[str, ...] = (), locale: str = "C.UTF-8") -> str:
    return run_script(tmp, "rc", E.rc_text(config, provenance="docker://x#y:z"), args, shell="bash",
                      env={"LC_ALL": locale})


@pytest.mark.parametrize(("config", "args", "expected"), [
    (ImageConfig(entrypoint=SHOW, cmd=("c1", "c 2")), (), shown("c1", "c 2")),
    (ImageConfig(entrypoint=SHOW, cmd=("c1",)), ("a", "", "b c"), shown("a", "", "b c")),
    (ImageConfig(cmd=(*SHOW, "only cmd")), (), shown("only cmd")),
    (ImageConfig(cmd=(*SHOW, "only cmd")), ("printf", "<%s>", "x"), "<x>"),
    (ImageConfig(entrypoint=(*SHOW, "fixed")), (), shown("fixed")),
    (ImageConfig(entrypoint=SHOW, cmd=TRICKY), (), shown(*TRICKY)),
    (ImageConfig(), ("sh", "-c", "echo from-sh"), "from-sh\n"),
], ids=["ep+cmd", "ep+args", "cmd", "cmd+args", "ep-only", "tricky", "neither"])
def test_rc_semantics(tmp_path: Path, config: ImageConfig, args: tuple[str, ...], expected: str) -> None:
    workdir = tmp_path / "work dir"
    config = ImageConfig(entrypoint=config.entrypoint, cmd=config.cmd, working_dir=str(workdir))
    assert run_rc(tmp_path, config, args) == expected
    assert workdir.is_dir()


def test_rc_execs_in_the_workdir(tmp_path: Path) -> None:
    config = ImageConfig(entrypoint=("sh", "-c", 'echo "$$ $(pwd) ${OLDPWD-unset}"'), working_dir=str(tmp_path / "w"))
    path = tmp_path / "rc"
    path.write_text(E.rc_text(config, provenance="docker://x#y:z"))
    proc = subprocess.Popen(["bash", str(path)], stdout=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"})
    out, _ = proc.communicate()
    assert out.decode() == f"{proc.pid} {tmp_path / 'w'} unset\n"  # exec: the shell *became* the entrypoint


def test_rc_is_shellcheck_clean(tmp_path: Path) -> None:
    path = tmp_path / "rc"
    path.write_text(E.rc_text(ImageConfig(entrypoint=SHOW, cmd=TRICKY), provenance="docker://x#y:z"))
    process.run(["shellcheck", "-s", "bash", "-S", "warning", path])


@SLOW_OK
@given(args=st.lists(ANY_TEXT, max_size=4), locale=st.sampled_from(["C.UTF-8", "C"]))
def test_any_argument_survives_rc(tmp_path: Path, args: list[str], locale: str) -> None:
    config = ImageConfig(entrypoint=("printf", "%s\\0"), cmd=tuple(args) or ("only",), working_dir=str(tmp_path))
    out = run_rc(tmp_path, config, locale=locale)
    assert out.split("\0")[:-1] == (args or ["only"])


@SLOW_OK
@given(values=st.lists(ANY_TEXT, min_size=1, max_size=8))
def test_bash_quote_equals_bash_at_q(tmp_path: Path, values: list[str]) -> None:
    proc = subprocess.run(["bash", "-c", 'a=("$@"); printf "%s\\0" "${a[@]@Q}"', "q", *values],
                          capture_output=True, check=True, env={**os.environ, "LC_ALL": "C.UTF-8"})
    assert proc.stdout.decode().split("\0")[:-1] == [E.bash_quote(v) for v in values]


# --- the whole /.singularity.d tree in a chroot (busybox-static as the image) ----------------------------
def busybox_root(tmp: Path, config: ImageConfig) -> Path:
    root = tmp / "root"
    (root / "bin").mkdir(parents=True)
    busybox = Path(process.require("busybox", purpose="build a tiny test image", package="busybox-static"))
    (root / "bin" / "busybox").write_bytes(busybox.read_bytes())
    (root / "bin" / "busybox").chmod(0o755)
    for applet in ("sh", "printf", "ls", "sort", "cat", "env"):
        (root / "bin" / applet).symlink_to("busybox")
    materialize(root, A.entries(config, deffile="bootstrap: docker\nfrom: bb\n", source_date_epoch=0))
    return root


def test_actions_run_in_a_chroot_loads_env_and_runs_the_runscript(tmp_path: Path) -> None:
    config = ImageConfig(entrypoint=("printf", "[%s]\n"), cmd=("default",),
                         env=("PATH=/bin", "GREETING=image value"))
    root = busybox_root(tmp_path, config)
    chroot = process.require("chroot", purpose="run the image scripts", package="coreutils")

    def run(*args: str, env: dict[str, str] | None = None) -> str:
        return process.run([chroot, root, *args], env={"PATH": "/bin", **(env or {})}).stdout

    assert run("/.singularity.d/actions/run") == "[default]\n"
    assert run("/.run", "a b", "") == "[a b]\n[]\n"
    assert run("/singularity", "x") == "[x]\n"
    assert run("/.singularity.d/actions/exec", "sh", "-c", 'echo "$GREETING|$LD_LIBRARY_PATH"') == \
        "image value|/.singularity.d/libs\n"
    assert run("/.exec", "sh", "-c", 'echo "$GREETING"', env={"GREETING": "host value"}) == "host value\n"
    assert run("/.singularity.d/actions/test") == "No test found in container, executing /bin/sh -c true\n"
    assert run("/.shell", "-c", "echo shell:$SHELL") == "shell:/bin/sh\n"
