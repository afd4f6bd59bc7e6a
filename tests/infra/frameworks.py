"""Real frameworks for ``ckit launch --runtime none`` jobs: one venv from Debian's python3 that sees Debian's
python3-torch and python3-mpi4py (``--system-site-packages``), with tensorflow-cpu and ray from PyPI pinned.
The same pins as wheels (``RUN/wheels/frameworks``, with a requirements.txt): the test image installs them
offline (``ckit build test-torch --set files.src=…``), so a build needs no PyPI access of its own. Beside them,
MPICH and an mpi4py for it (``mpich.txt``): the image's second MPI, whose PMI client talks to Slurm's
``--mpi=pmi2`` (Debian's Open MPI speaks only PMIx), in a venv of its own so that Debian's mpi4py stays the default.

The venv lives in the run dir (``RUN/venvs/frameworks``); a file in it records the pins it was made with, so a
change of pins makes it again. Lmod's test modules (``RUN/modulefiles``) are written here too: ``ckit-test/1.0``
sets CKIT_TEST_MODULE, which a job that loaded it prints.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .daemon import Component, ComponentError, run

PINS = ("tensorflow-cpu==2.21.0", "ray==2.60.0", "numpy<2")
MPICH_PINS = ("mpi4py==4.1.2", "mpich==5.0.2")  # PyPI's MPICH wheel: PMI-1/PMI-2 clients, for srun --mpi=pmi2
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: its dist-packages hold python3-torch and python3-mpi4py
MODULEFILE = """\
help([[A test module of ckit's launch tests]])
whatis("ckit test module")
setenv("CKIT_TEST_MODULE", "loaded from lmod")
prepend_path("PATH", "{bin}")
"""


class FrameworkVenv(Component):
    name = "frameworks"

    @property
    def path(self) -> Path:
        return self.run / "venvs" / "frameworks"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def modulefiles(self) -> Path:
        return self.run / "modulefiles"

    def env(self) -> dict[str, str]:
        return {}

    def healthy(self) -> bool:
        stamp = self.path / "ckit-pins.txt"
        return self.python.is_file() and stamp.is_file() and stamp.read_text() == "\n".join(PINS)

    def _start(self) -> None:
        for module in ("torch", "mpi4py", "numpy"):
            try:
                run([SYSTEM_PYTHON, "-c", f"import {module}"], timeout=120)
            except ComponentError:
                raise ComponentError(f"{SYSTEM_PYTHON} cannot import {module}: run `bash tests/infra/install.sh` "
                                     "(python3-torch, python3-mpi4py)") from None
        shutil.rmtree(self.path, ignore_errors=True)
        run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", str(self.path)], timeout=300)
        run([str(self.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PINS], timeout=1200)
        (self.path / "ckit-pins.txt").write_text("\n".join(PINS))
        self.write_modulefiles()

    def write_modulefiles(self) -> None:
        tool = self.modulefiles / "ckit-test-bin"
        tool.mkdir(parents=True, exist_ok=True)
        (tool / "ckit-test-tool").write_text("#!/bin/sh\necho ckit-test-tool from the module\n")
        (tool / "ckit-test-tool").chmod(0o755)
        (self.modulefiles / "ckit-test").mkdir(exist_ok=True)
        (self.modulefiles / "ckit-test" / "1.0.lua").write_text(MODULEFILE.format(bin=tool))

    def _stop(self) -> None:
        """A folder: nothing runs, nothing to stop."""


class FrameworkWheels(Component):
    """The wheels of PINS and everything they need, downloaded by the frameworks venv's pip (from its cache
    after the venv's own install), for an image built offline: ~400 MB, ~10 s."""

    name = "framework-wheels"
    requires = ("frameworks",)

    @property
    def path(self) -> Path:
        return self.run / "wheels" / "frameworks"

    def healthy(self) -> bool:
        return all((self.path / name).is_file() and (self.path / name).read_text() == "".join(f"{p}\n" for p in pins)
                   for name, pins in (("requirements.txt", PINS), ("mpich.txt", MPICH_PINS)))

    def _start(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.mkdir(parents=True)
        for name, pins in (("requirements.txt", PINS), ("mpich.txt", MPICH_PINS)):
            run([str(FrameworkVenv(self.run).python), "-m", "pip", "download", "--quiet",
                 "--disable-pip-version-check", "--only-binary=:all:", "--dest", str(self.path), *pins], timeout=1200)
            (self.path / name).write_text("".join(f"{pin}\n" for pin in pins))

    def _stop(self) -> None:
        """A folder: nothing runs, nothing to stop."""


HOROVOD_PIN = "horovod==0.28.1"
HOROVOD_BUILD = {"HOROVOD_WITH_PYTORCH": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1",
                 "HOROVOD_WITHOUT_TENSORFLOW": "1", "HOROVOD_WITHOUT_MXNET": "1", "MAKEFLAGS": "-j2"}


class HorovodVenv(FrameworkVenv):
    """Horovod with Gloo built from its sdist against Debian's torch 1.13 (libtorch-dev, pybind11-dev, cmake,
    g++): about 6 minutes on 2 CPUs, so its own venv, made once per run dir."""

    name = "horovod"

    @property
    def path(self) -> Path:
        return self.run / "venvs" / "horovod"

    def healthy(self) -> bool:
        stamp = self.path / "ckit-pins.txt"
        return self.python.is_file() and stamp.is_file() and stamp.read_text() == HOROVOD_PIN

    def _start(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", str(self.path)], timeout=300)
        run([str(self.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-cache-dir",
             "--no-build-isolation", HOROVOD_PIN], env=HOROVOD_BUILD, timeout=2400)
        (self.path / "ckit-pins.txt").write_text(HOROVOD_PIN)
