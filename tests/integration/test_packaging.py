"""`pip install .` in a fresh venv gives a working `ckit` with every stack, rendering in both formats."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fresh_venv_install(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, str(ROOT)], check=True, cwd=tmp_path)
    ckit = str(venv / "bin" / "ckit")
    listed = subprocess.run([ckit, "recipes"], check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    expected = ["pytorch-horovod", "tensorflow-horovod", "nccl-tests", "pytorch-ddp", "tf-multiworker",
                "pytorch-ray", "mindspore-ascend", "horovod-apulis", "demo", "hello"]
    for stack in expected:
        assert f"  {stack} " in listed, stack
        for fmt in ("docker", "singularity"):
            out = subprocess.run([ckit, "render", stack, "--format", fmt], check=True, capture_output=True,
                                 text=True, cwd=tmp_path).stdout
            assert out.startswith("# Dockerfile" if fmt == "docker" else "Bootstrap: docker")
    # the installed package carries its data: it does not read the source tree
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import buildkit.config.searchpath as s; print(s.builtin_dir('recipes'))"],
                          check=True, capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert str(venv) in site
    # the Pyxis importer an admin names in plugstack.conf (importer=…/bin/ckit-pyxis-importer)
    usage = subprocess.run([str(venv / "bin" / "ckit-pyxis-importer")], capture_output=True, text=True, cwd=tmp_path,
                           check=False)
    assert usage.returncode == 2 and "usage: ckit-pyxis-importer get IMAGE_URI" in usage.stderr
    # one version: the package's metadata is made from buildkit.__version__, and --version says the same
    from buildkit import __version__

    meta = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('ckit'))"],
                          check=True, capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    shown = subprocess.run([ckit, "--version"], check=True, capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert meta == __version__ and shown == f"ckit {__version__}"
    # the Python API under the distribution's name; importing it (or buildkit) loads nothing more until used
    api = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import sys, buildkit, ckit; before = sorted(m for m in sys.modules if m.startswith("
                          "'buildkit')); print(before, ckit.launch.__module__, ckit.Job.__name__)"],
                         check=True, capture_output=True, text=True, cwd=tmp_path).stdout.split()
    assert api == ["['buildkit',", "'buildkit.api']", "buildkit.api._launch", "Job"]
