"""Renderers: exact Dockerfile and .def for every stack and for the seed guides' containers."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from buildkit.recipe.catalog import Catalog
from buildkit.recipe.model import Run
from buildkit.render import dockerfile, singularity
from tests.unit.test_first_hour_rules import write_readme_project

CATALOG = Catalog.from_dirs()
STACKS = CATALOG.stack_names()

# The containers of the seed guides, as a stack plus parameters.
SEEDS = {
    # TWCC (000): pytorch_20.09-py3_horovod.def
    "twnia2-pytorch-horovod": ("pytorch-horovod", ["horovod.version=0.20.3"], "20.09"),
    # TWCC (000): the plain NGC TensorFlow 1 / 2 images its jobs run
    "twnia2-tensorflow1": ("tensorflow-horovod", ["ngc-tensorflow.variant=tf1"], "20.09"),
    "twnia2-tensorflow2": ("tensorflow-horovod", [], "20.09"),
    # Oracle (002): nccl-tests built inside nvcr.io/nvidia/tensorflow:24.06-tf2-py3
    "oci-nccl-tests": ("nccl-tests", [], "24.06"),
    "oci-tf-multiworker": ("tf-multiworker", [], "24.06"),
    # KISTI (001): PyTorch 22.11 + Horovod with MPI and Gloo; DDP; Ray
    "neuron-pytorch-horovod-gloo": ("pytorch-horovod", ["horovod.controllers=mpi,gloo"], "22.11"),
    "neuron-pytorch-ddp": ("pytorch-ddp", [], "22.11"),
    "neuron-pytorch-ray": ("pytorch-ray", [], "24.06"),
    # Apulis (003)
    "apulis-mindspore": ("mindspore-ascend", [], None),
    "apulis-horovod": ("horovod-apulis", [], None),
    # TARA (004)
    "tara-pytorch-ddp": ("pytorch-ddp", [], "24.06"),
}


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_renders_both_formats(stack: str, golden) -> None:
    recipe = CATALOG.resolve(stack)
    golden(f"recipes/{stack}.Dockerfile", dockerfile.render(recipe))
    golden(f"recipes/{stack}.def", singularity.render(recipe))


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_containers(name: str, golden) -> None:
    stack, sets, ngc = SEEDS[name]
    recipe = CATALOG.resolve(stack, sets=sets, ngc=ngc)
    golden(f"seeds/{name}.Dockerfile", dockerfile.render(recipe))
    golden(f"seeds/{name}.def", singularity.render(recipe))


def test_twnia2_def_matches_the_hand_written_one() -> None:
    """Seed 000's .def: same base, same Horovod build flags, stubs on the library path for the build only."""
    recipe = CATALOG.resolve("pytorch-horovod", sets=["horovod.version=0.20.3"], ngc="20.09")
    text = singularity.render(recipe)
    assert text.startswith("Bootstrap: docker\nFrom: nvcr.io/nvidia/pytorch:20.09-py3\n")
    post = text.split("%post\n", 1)[1]
    assert ". /.singularity.d/env/10-docker*.sh" in post
    step = post[post.index("(\n"): post.index(")\n")]
    for flag in ["HOROVOD_GPU=\"CUDA\"", "HOROVOD_GPU_OPERATIONS=\"NCCL\"", "HOROVOD_NCCL_LINK=\"SHARED\"",
                 "HOROVOD_WITHOUT_GLOO=\"1\"", "HOROVOD_WITH_MPI=\"1\"", "HOROVOD_WITH_PYTORCH=\"1\"",
                 "HOROVOD_WITHOUT_TENSORFLOW=\"1\"", "HOROVOD_WITHOUT_MXNET=\"1\"",
                 "LD_LIBRARY_PATH=\"/usr/local/cuda/lib64/stubs:$LD_LIBRARY_PATH\""]:
        assert flag in step, flag
    assert "pip install --no-cache-dir horovod==0.20.3" in step
    assert "stubs" not in text.split("%environment", 1)[-1].split("%post")[0]
    assert "%environment" not in text  # nothing leaks to run time


def _docker_facts(text: str) -> tuple[dict[str, str], list[str] | None, list[str] | None]:
    import json

    joined = text.replace(" \\\n    ", " ")
    labels: dict[str, str] = {}
    entry = cmd = None
    for line in joined.splitlines():
        if line.startswith("LABEL "):
            for key, value in re.findall(r'([\w./-]+)="((?:[^"\\]|\\.)*)"', line):
                labels[key] = re.sub(r"\\(.)", r"\1", value)
        elif line.startswith("ENTRYPOINT "):
            entry = json.loads(line[len("ENTRYPOINT "):])
        elif line.startswith("CMD "):
            cmd = json.loads(line[len("CMD "):])
    return labels, entry, cmd


def _def_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("%"):
            current = line[1:]
            sections[current] = []
        elif current and line.strip():
            sections[current].append(line.strip())
    return sections


BASE_ENV = {"PATH": "/base/bin:/usr/bin:/bin", "LD_LIBRARY_PATH": "/base/lib", "PYTHONPATH": "/base/py"}


def run_time_env(exports: list[str]) -> dict[str, str]:
    """The environment after ``exports`` (``export A="x" B="$A"`` lines) on a base image's environment, as sh
    gives it: all words of a line are expanded before it assigns, an unset variable expands to nothing. (The
    values are double-quoted and hold ``$`` only as ``$NAME``/``${NAME}``: the recipe loader allows no more.)"""
    env = dict(BASE_ENV)
    for line in exports:
        assert line.startswith("export "), line
        pairs = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"', line)
        before = dict(env)
        for name, value in pairs:
            env[name] = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m, known=before: known.get(m[1], ""), value)
    return env


def docker_env_exports(text: str) -> list[str]:
    """Each ENV instruction as the equivalent sh export (values are quoted the same way in both)."""
    joined = text.replace(" \\\n    ", " ")
    return ["export " + line[len("ENV "):] for line in joined.splitlines() if line.startswith("ENV ")]


@pytest.mark.parametrize("stack", STACKS)
def test_both_formats_carry_the_same_env_labels_and_entrypoint(stack: str) -> None:
    import shlex

    recipe = CATALOG.resolve(stack)
    text = dockerfile.render(recipe)
    labels, entry, cmd = _docker_facts(text)
    sections = _def_sections(singularity.render(recipe))
    # the run-time environment: Docker's ENV steps in order vs the .def's %environment, both on the same base
    assert run_time_env(sections.get("environment", [])) == run_time_env(docker_env_exports(text))
    def_labels = dict(line.split(" ", 1) for line in sections["labels"])
    assert def_labels == labels
    runscript = sections.get("runscript", [])
    if entry is None and cmd is None:
        assert runscript == []
    else:
        assert runscript[-1] == "exec " + " ".join([*(shlex.quote(w) for w in entry or []), '"$@"'])
        if cmd:
            assert runscript[0] == f'if [ "$#" -eq 0 ]; then set -- {" ".join(shlex.quote(w) for w in cmd)}; fi'


def test_path_entries_of_every_env_step_reach_the_def(tmp_path: Path) -> None:
    """The README's first recipe sets PATH twice (hello's folder, then the venv): the .def keeps both, in
    Docker's order, on the base's PATH (before, only the venv's: ``hello`` was not found under apptainer)."""
    recipe = Catalog.from_dirs([write_readme_project(tmp_path)]).resolve("myapp")
    environment = _def_sections(singularity.render(recipe))["environment"]
    assert 'export PATH="/opt/venv/bin:/opt/ckit-demo:$PATH"' in environment
    assert run_time_env(environment)["PATH"] == "/opt/venv/bin:/opt/ckit-demo:/base/bin:/usr/bin:/bin"


def test_labels_record_stack_parameters_and_version() -> None:
    import json

    from buildkit import __version__

    recipe = CATALOG.resolve("pytorch-horovod", sets=["horovod.version=0.20.3"], ngc="20.09")
    labels = dict(recipe.labels)
    assert labels["io.ckit.stack"] == "pytorch-horovod"
    assert labels["io.ckit.version"] == __version__
    params = json.loads(labels["io.ckit.parameters"])
    assert params["horovod"]["version"] == "0.20.3" and params["ngc-pytorch"]["release"] == "20.09"
    assert labels["org.opencontainers.image.base.name"] == "nvcr.io/nvidia/pytorch:20.09-py3"


def test_output_is_deterministic() -> None:
    first = [dockerfile.render(Catalog.from_dirs().resolve(s)) for s in STACKS]
    second = [dockerfile.render(Catalog.from_dirs().resolve(s)) for s in STACKS]
    assert first == second


@pytest.mark.parametrize("stack", STACKS)
def test_never_latest(stack: str) -> None:
    recipe = CATALOG.resolve(stack)
    assert not recipe.base_image.endswith(":latest") and ":" in recipe.base_image.rsplit("/", 1)[-1]


@pytest.mark.parametrize("stack", STACKS)
def test_def_reads_back_with_spython(stack: str, tmp_path) -> None:
    """An independent parser (spython's) sees the same base, environment, labels and files in every .def."""
    from spython.main.parse.parsers import SingularityParser

    recipe = CATALOG.resolve(stack)
    path = tmp_path / "Singularity.def"
    path.write_text(singularity.render(recipe))
    parsed = SingularityParser(str(path)).recipe["spython-base"]
    assert parsed.fromHeader == recipe.base_image
    assert parsed.environ == [f'{k}="{v}"' for k, v in recipe.env]
    assert parsed.labels == [f"{k} {v}" for k, v in recipe.labels]
    copies = [s for s in recipe.steps if s.__class__.__name__ == "Copy"]
    assert parsed.files == [f"{c.context} {c.dest}" for c in copies]


@pytest.mark.parametrize(("renderer", "what"), [(dockerfile, "Dockerfile"), (singularity, "Singularity .def")])
def test_a_step_kind_a_renderer_does_not_know_fails_instead_of_vanishing(renderer, what: str) -> None:
    """A step the renderer has no writer for was silently left out (an image without it); now it is an error."""
    from dataclasses import dataclass, replace

    from buildkit.errors import BuildError

    @dataclass(frozen=True)
    class Mount:  # a step kind added to the model but not to this renderer
        target: str

    recipe = CATALOG.resolve(STACKS[0])
    broken = replace(recipe, steps=(*recipe.steps, Mount("/data")))
    with pytest.raises(BuildError, match=f"the {re.escape(what)} renderer cannot write a Mount step") as err:
        renderer.render(broken)
    assert "buildkit/render/" in (err.value.hint or "")


@pytest.mark.parametrize("renderer", [dockerfile, singularity])
def test_apt_leaves_no_package_archives_in_the_layer(renderer, tmp_path) -> None:
    """A base without docker-clean (mmdebstrap's) kept every downloaded .deb: 321 MB in the test image."""
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "a.yaml").write_text(
        "kind: stack\ndescription: a\nextends: demo\naddons: [apt]\nparameters: {apt: {packages: [less]}}\n")
    text = renderer.render(Catalog.from_dirs([tmp_path]).resolve("a"))
    install = text.index("apt-get install -y --no-install-recommends less")
    assert install < text.index("apt-get clean", install) < text.index("rm -rf /var/lib/apt/lists/*", install)


def _instructions(text: str) -> list[str]:
    return [line.split()[0] for line in text.replace(" \\\n    ", " ").splitlines()
            if line and not line.startswith(("#", " "))]


def test_what_changes_most_comes_last_in_the_dockerfile(tmp_path: Path) -> None:
    """The steps in the recipe's order; ENTRYPOINT/CMD after the last RUN, before the code copied after it; the
    labels (whose fingerprint changes with any copied file) last. The .def keeps the same steps in %post."""
    recipe = Catalog.from_dirs([write_readme_project(tmp_path)]).resolve("myapp")
    text = dockerfile.render(recipe)
    assert _instructions(text) == ["FROM", "ENV", "COPY", "RUN", "RUN", "RUN", "ENV", "RUN", "ENTRYPOINT", "CMD",
                                   "COPY", "LABEL"]
    assert 'CMD []\n\nCOPY ["files/2-app", "/workspace/app"]\n\nLABEL io.ckit.stack="myapp"' in text
    no_run = replace(recipe, steps=tuple(s for s in recipe.steps if not isinstance(s, Run)))
    assert _instructions(dockerfile.render(no_run))[:4] == ["FROM", "ENTRYPOINT", "CMD", "ENV"]
