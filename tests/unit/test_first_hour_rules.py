"""The first hour of a new user, in pure code: the README's first recipe resolves, add-on copies, the python
add-on, ``render -o DIR/``, ``--dry-run`` without an engine, global flags anywhere, compression levels per
target, /etc/rc without a host path, the progress texts."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from buildkit.cli import main
from buildkit.commands.app import app
from buildkit.commands.flags import hoist_global_flags
from buildkit.commands.progress_bars import count_text, time_text
from buildkit.errors import CompatError, ConfigError
from buildkit.image.convert import provenance
from buildkit.image.model import ImageConfig
from buildkit.image.rootfs import enroot as E
from buildkit.image.sources.named import parse_source
from buildkit.image.squashfs.compression import choose, parse_compression
from buildkit.recipe.catalog import Catalog
from buildkit.recipe.model import Copy, Run
from buildkit.registry.source import open_source
from tests import doctext

ROOT = Path(__file__).resolve().parents[2]
README = doctext.text()


def readme_files(section: str) -> dict[str, str]:
    """The files a README section shows as ```LANG blocks under a `path`: line."""
    text = README.split(section, 1)[1]
    text = text.split("\n### ", 1)[0]
    return {m[1]: m[2] for m in re.finditer(r"`([\w./-]+)`:\n\n```\w+\n(.*?)```", text, re.S)}


def write_readme_project(root: Path) -> Path:
    files = readme_files("### Your first recipe")
    assert set(files) == {"myproject/stacks/myapp.yaml", "myproject/app/main.py"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "myproject"


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


# --- the README's first recipe and the recipe rules it needs -------------------------------------------


def test_the_readme_first_recipe_resolves(tmp_path: Path) -> None:
    project = write_readme_project(tmp_path)
    recipe = Catalog.from_dirs([project]).resolve("myapp")
    assert [layer.name for layer in recipe.layers] == ["debian", "env", "files", "shell", "labels", "python",
                                                       "pip", "code"]
    copies = [s for s in recipe.steps if isinstance(s, Copy)]
    assert [(c.context, c.dest) for c in copies] == [("files/1-demo", "/opt/ckit-demo"),
                                                     ("files/2-app", "/workspace/app")]
    assert copies[1].source == (project / "app").resolve()
    runs = [c for s in recipe.steps if isinstance(s, Run) for c in s.commands]
    assert "python3 -m venv /opt/venv" in runs
    assert "python3 -m pip install --no-cache-dir tabulate==0.9.0" in runs
    assert ("PATH", "/opt/venv/bin:/opt/ckit-demo:$PATH") in recipe.env and recipe.entrypoint == ("python", "/workspace/app/main.py")
    assert recipe.cmd == ()


def test_an_addon_listed_again_names_the_way_out(tmp_path: Path) -> None:
    # before: "add-on 'files' is listed twice (also by a stack it extends)" with no way to add a second one
    _write(tmp_path, "stacks/mine.yaml", """\
        kind: stack
        description: mine
        extends: demo
        addons: [files]
        """)
    with pytest.raises(ConfigError) as err:
        Catalog.from_dirs([tmp_path]).resolve("mine")
    text = str(err.value)
    assert "mine.yaml:4" in text and "add-on 'files' is already in stack hello" in text  # demo extends hello
    assert "list it as 'files as NAME'" in text


def test_alias_of_an_unknown_addon_and_a_bad_entry_are_errors(tmp_path: Path) -> None:
    _write(tmp_path, "stacks/a.yaml", "kind: stack\ndescription: a\nextends: demo\naddons: [fils as code]\n")
    with pytest.raises(ConfigError, match="did you mean 'files'"):
        Catalog.from_dirs([tmp_path]).resolve("a")
    _write(tmp_path, "stacks/b.yaml", "kind: stack\ndescription: b\nextends: demo\naddons: [files as]\n")
    with pytest.raises(ConfigError, match="b.yaml:4"):
        Catalog.from_dirs([tmp_path]).resolve("b")
    _write(tmp_path, "stacks/c.yaml", "kind: stack\ndescription: c\nextends: demo\naddons: [apt as debian]\n")
    with pytest.raises(ConfigError, match="'debian' is the base's name"):
        Catalog.from_dirs([tmp_path]).resolve("c")


def test_pip_on_debian_points_to_the_python_addon(tmp_path: Path) -> None:
    # before: "requires pip, which neither base debian nor an earlier add-on provides", and no add-on did
    _write(tmp_path, "stacks/p.yaml", "kind: stack\ndescription: p\nextends: demo\naddons: [pip]\n")
    with pytest.raises(CompatError, match="the python add-on provides pip"):
        Catalog.from_dirs([tmp_path]).resolve("p")
    _write(tmp_path, "stacks/q.yaml", "kind: stack\ndescription: q\nbase: ubuntu\naddons: [python, pip]\n"
                                      "parameters: {pip: {packages: [tabulate==0.9.0]}}\n")
    assert Catalog.from_dirs([tmp_path]).resolve("q").provides[-2:] == ("python", "pip")
    _write(tmp_path, "stacks/n.yaml", "kind: stack\ndescription: n\nextends: pytorch-ddp\naddons: [python]\n")
    with pytest.raises(CompatError, match="provides python, pip, which the stack already has"):
        Catalog.from_dirs([tmp_path]).resolve("n")


def test_demo_is_hello_on_the_local_base() -> None:
    catalog = Catalog.from_dirs()
    hello, demo = catalog.resolve("hello"), catalog.resolve("demo")
    assert hello.base_image == "docker.io/library/debian:bookworm"
    assert demo.base_image == "localhost/debian:bookworm"
    assert hello.steps == demo.steps and hello.entrypoint == demo.entrypoint == ("hello",)


def test_reference_documents_kind_and_required_keys() -> None:
    from buildkit.recipe.schema import reference_markdown

    block = reference_markdown()  # the docs site's recipe file reference page
    for kind in ("stack", "base", "addon", "facts"):
        assert f"| `kind` **(required)** | Always `{kind}`: what this file is. |" in block
    assert "`NAME as ALIAS`" in block


# --- render -o DIR/ ---------------------------------------------------------------------------------


def test_render_to_a_folder_writes_the_whole_context(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ctx"
    assert main(["render", "demo", "-o", f"{out}/"]) == 0
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "Dockerfile", "files/1-demo/hello"]
    dockerfile = (out / "Dockerfile").read_text()
    assert 'COPY ["files/1-demo", "/opt/ckit-demo"]' in dockerfile
    assert (out / "files/1-demo/hello").stat().st_mode & 0o111  # the program stays executable
    # the other format into the same (ckit-written) folder: both recipe files, one files/
    assert main(["render", "demo", "--format", "singularity", "-o", str(out)]) == 0
    assert "files/1-demo /opt/ckit-demo" in (out / "Singularity.def").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left behind


def test_render_refuses_what_it_cannot_write_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["render", "demo", "-o", str(tmp_path / "Dockerfile")]) == 2
    assert "one file cannot hold" in capsys.readouterr().err and not (tmp_path / "Dockerfile").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["render", "demo", "-o", str(mine)]) == 2
    assert "ckit did not render (notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert main(["render", "demo"]) == 0
    assert "`ckit render demo -o DIR/` writes them too" in capsys.readouterr().err


# --- CLI conventions --------------------------------------------------------------------------------


def _group():  # type: ignore[no-untyped-def]
    import typer.main

    return typer.main.get_command(app)


@pytest.mark.parametrize(("argv", "hoisted"), [
    (["build", "demo", "-q"], ["-q", "build", "demo"]),
    (["build", "demo", "--debug", "--to", "sqsh"], ["--debug", "build", "demo", "--to", "sqsh"]),
    (["--recipes", "r", "show", "demo", "--quiet"], ["--recipes", "r", "--quiet", "show", "demo"]),
    (["sites", "show", "tara", "-q"], ["-q", "sites", "show", "tara"]),
    # the value of an option, and the job's own command line after --, stay where they are
    (["launch", "--site", "local", "--name", "--debug", "--", "python", "-q"],
     ["launch", "--site", "local", "--name", "--debug", "--", "python", "-q"]),
    (["launch", "--site", "local", "-q", "--", "python", "--debug"],
     ["-q", "launch", "--site", "local", "--", "python", "--debug"]),
])
def test_global_flags_anywhere(argv: list[str], hoisted: list[str]) -> None:
    assert hoist_global_flags(argv, _group()) == hoisted


def test_a_command_may_define_its_own_short_flag() -> None:
    qos = SimpleNamespace(opts=["-q", "--qos"], secondary_opts=[], is_flag=False, count=False)
    group = SimpleNamespace(commands={"x": SimpleNamespace(params=[qos])})
    assert hoist_global_flags(["x", "-q", "high", "--debug"], group) == ["--debug", "x", "-q", "high"]


def test_quiet_after_the_subcommand_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    # before: "No such option: -q" (exit 2)
    assert main(["recipes", "-q", "--json"]) == 0
    assert '"stacks"' in capsys.readouterr().out


def test_dry_run_needs_no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    # before: exit 2 "no build engine is available" although --dry-run only prints the plan
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("PATH", str(tmp_path))  # no apptainer or singularity
    capsys.readouterr()
    assert main(["build", "hello", "--to", "image,sqsh", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("plan: build hello with docker (auto; not available here: no build engine is available")
    assert "  base         docker.io/library/debian:bookworm\n" in out and "convert " in out
    assert main(["build", "hello"]) == 2  # a real build still needs one


def test_completion_scripts_for_three_shells(capsys: pytest.CaptureFixture[str]) -> None:
    for shell, marker in (("bash", "complete -o default -F _ckit_completion ckit"), ("zsh", "#compdef ckit"),
                          ("fish", "complete --command ckit")):
        capsys.readouterr()
        assert main(["completion", shell]) == 0
        assert marker in capsys.readouterr().out
    assert main(["completion", "tcsh"]) == 2
    assert main(["--help"]) == 0
    assert "--install-completion" in capsys.readouterr().out


def _parents(monkeypatch: pytest.MonkeyPatch, shell: str | None, login: str) -> None:
    """ckit's nearest shell parent (None: none, as under make, an IDE or ``bash -c ckit``) and ``$SHELL``."""
    import shellingham

    def detect() -> tuple[str, str]:
        if shell is None:
            raise shellingham.ShellDetectionFailure
        return shell, f"/bin/{shell}"

    monkeypatch.setattr(shellingham, "detect_shell", detect)
    monkeypatch.setenv("SHELL", login)


@pytest.mark.parametrize(("parent", "login", "chosen"), [
    ("bash", "/bin/zsh", "bash"), (None, "/usr/bin/zsh", "zsh"), ("sh", "/bin/bash", "bash"),
    (None, "/usr/local/bin/fish", "fish")])
def test_completion_is_for_the_parent_shell_else_the_login_shell(monkeypatch, parent, login, chosen) -> None:
    from buildkit.commands.shells import current

    _parents(monkeypatch, parent, login)
    assert current() == chosen


def test_install_completion_without_a_shell_parent_installs_for_shell(monkeypatch, tmp_path, capsys) -> None:
    _parents(monkeypatch, None, "/bin/bash")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["--install-completion"]) == 0
    assert "bash completion installed in" in capsys.readouterr().out
    assert f"source '{tmp_path}/.bash_completions/ckit.sh'" in (tmp_path / ".bashrc").read_text()
    assert "_ckit_completion" in (tmp_path / ".bash_completions/ckit.sh").read_text()


def test_completion_for_a_shell_ckit_does_not_complete_in_is_refused_with_the_way_out(monkeypatch, tmp_path,
                                                                                       capsys) -> None:
    _parents(monkeypatch, "tcsh", "/bin/tcsh")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["--show-completion"]) == 2
    err = capsys.readouterr().err
    assert "ckit completes in bash, zsh, fish; this shell is tcsh" in err and "ckit completion bash >" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("text", "target", "label"), [
    ("zstd", "sqsh", "zstd:-3"), ("zstd", "sif", "zstd:1"), ("zstd:5", "sqsh", "zstd:5"),
    ("gzip", "sqsh", "gzip:1"), ("xz", "sif", "xz:0"), ("zstd", None, "zstd:1"),
])
def test_an_algorithm_without_level_gets_the_targets_level(text: str, target: str | None, label: str) -> None:
    # before: --compress zstd was zstd:1 for a .sqsh too, whose default is zstd:-3
    assert parse_compression(text, target).label == label
    if target:
        assert choose(text, target=target).label == label


# --- honest artifacts -----------------------------------------------------------------------------


def test_rc_names_no_host_path(tmp_path: Path) -> None:
    # before: "# enroot-provenance: docker-archive:/the/host/path.tar"
    archive = tmp_path / "secret-project" / "img.tar"
    assert provenance(parse_source(f"docker-archive:{archive}")) == ""
    assert provenance(parse_source(f"oci:{tmp_path}/layout:1")) == ""
    assert provenance(parse_source("docker-daemon:localhost/app:1")) == "dockerd://localhost/app:1"
    assert provenance(open_source("docker://127.0.0.1:5000/team/app:1")) == "docker://127.0.0.1:5000#team/app:1"
    assert provenance(open_source("docker://ubuntu:24.04")) == "docker://registry-1.docker.io#library/ubuntu:24.04"
    # a pinned digest where the tag goes, the tag of TAG@DIGEST dropped: as enroot writes what it parsed
    digest = "sha256:" + "a" * 64
    assert provenance(open_source(f"docker://127.0.0.1:5000/team/app@{digest}")) == \
        f"docker://127.0.0.1:5000#team/app:{digest}"
    assert provenance(open_source(f"docker://nvcr.io/nvidia/pytorch:24.06-py3@{digest}")) == \
        f"docker://nvcr.io#nvidia/pytorch:{digest}"
    rc = E.rc_text(ImageConfig(cmd=("/bin/sh",)), provenance="")
    assert rc.startswith('mkdir -p "/" 2> /dev/null\n')  # enroot writes the empty line only after comments
    labelled = E.rc_text(ImageConfig(cmd=("/bin/sh",), labels=(("a", "1"),)), provenance="")
    assert labelled.startswith("# a 1\n\nmkdir")


# --- progress texts ---------------------------------------------------------------------------------


class _Task:
    def __init__(self, total: float | None, remaining: float | None, elapsed: float) -> None:
        self.total, self.time_remaining, self.elapsed = total, remaining, elapsed


def test_progress_texts_never_invent_a_total() -> None:
    assert count_text(12_300_000, 45_600_000, "bytes") == "12.3/45.6 MB"
    assert count_text(999, 45_600_000, "bytes") == "999 bytes/45.6 MB"
    assert count_text(12_300_000, None, "bytes") == "12.3 MB"
    assert count_text(5, 12, "steps") == ""  # the description says "step 6/12": no second, different count
    assert time_text(_Task(100, 65, 3)) == "eta 0:01:05"
    assert time_text(_Task(100, None, 3)) == "eta -:--:--"
    assert time_text(_Task(None, None, 75)) == "0:01:15"


def test_lock_of_a_local_base_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    # before: "cannot reach registry localhost (https://localhost/v2/): connection refused", exit 1
    capsys.readouterr()
    assert main(["lock", "demo"]) == 2
    err = capsys.readouterr().err
    assert "stack demo builds on localhost/debian:bookworm, an image of the local engine" in err
    assert "--set debian.registry=REGISTRY/NAMESPACE" in err
