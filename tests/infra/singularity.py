"""SingularityCE 3.4.2 as the Singularity sites run it: the real runtime the ``.sif`` tests run their images with.

The runtime itself is the prebuilt tree ``/opt/ckit-runtimes/singularity-3.4.2`` (shared/runtimes: SingularityCE
v3.4.2 with one patch, setuid starter; its ``install.sh`` puts it there). This component does not install it: a
machine without it makes the tests that need it fail (ERROR), never skip. It makes what the sites' job scripts
and ``ckit build --engine apptainer`` need on top:

* Lmod modules under the names the site profiles load (``singularity`` and ``singularity/3.11.0`` of twnia2 and
  neuron, ``Singularity`` of tara), each putting this 3.4.2 on PATH: the scripts run as ckit writes them
  (``module load …``), only MODULEPATH (``modulefiles``) points here;
* a subordinate id range for root in /etc/subuid and /etc/subgid: root on these machines lacks
  CAP_SYS_RESOURCE in its bounding set, so ckit builds with ``--fakeroot`` (see buildkit/engine/apptainer.py),
  which needs it.

Nothing runs: there is nothing to stop.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .daemon import Component, ComponentError, run

VERSION = "3.4.2"
HOME = Path(f"/opt/ckit-runtimes/singularity-{VERSION}")
BINARY = HOME / "bin" / "singularity"
# the module names the built-in site profiles load (sites/*.yaml runtimes[].module)
MODULES = ("singularity/3.11.0", "Singularity/3.4.2")
MODULEFILE = """\
help([[SingularityCE {version} of ckit's tests, under the name a site's profile loads]])
whatis("SingularityCE {version}")
prepend_path("PATH", "{bin}")
"""
SUBID_RANGE = "1000000:65536"  # root's, for `singularity build --fakeroot`


class Singularity(Component):
    name = "singularity"

    @property
    def binary(self) -> Path:
        return BINARY

    @property
    def bin_dir(self) -> Path:
        return BINARY.parent

    @property
    def modulefiles(self) -> Path:
        return self.run / "modulefiles-singularity"

    def __call__(self, *args: str, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``singularity ARGS`` as a user runs it (this environment plus ``env``)."""
        return subprocess.run([str(BINARY), *args], capture_output=True, text=True, timeout=300,  # noqa: S603
                              env={**os.environ, **(env or {})}, cwd=cwd, check=False)

    def version(self) -> str:
        return run([str(BINARY), "--version"], timeout=30).stdout.decode().strip()

    def _subids_missing(self) -> list[Path]:
        files = [Path("/etc/subuid"), Path("/etc/subgid")]
        return [f for f in files if not any(line.startswith("root:") for line in
                                           (f.read_text().splitlines() if f.is_file() else []))]

    def healthy(self) -> bool:
        return (BINARY.is_file() and Path("/dev/loop-control").exists() and not self._subids_missing()
                and all((self.modulefiles / f"{m}.lua").is_file() for m in MODULES))

    def _start(self) -> None:
        if not BINARY.is_file():
            raise ComponentError(f"SingularityCE {VERSION} is not installed ({BINARY} is missing): install the "
                                 "prebuilt runtimes under /opt/ckit-runtimes (`bash tests/infra/install.sh`)")
        if self.version() != f"singularity version {VERSION}":
            raise ComponentError(f"{BINARY} is {self.version()!r}, not SingularityCE {VERSION}")
        if not Path("/dev/loop-control").exists():
            raise ComponentError("no loop devices (/dev/loop-control): singularity mounts a .sif through one")
        for path in self._subids_missing():
            with path.open("a") as handle:
                handle.write(f"root:{SUBID_RANGE}\n")
            self.journal(f"root:{SUBID_RANGE} added to {path} (singularity build --fakeroot as root)")
        shutil.rmtree(self.modulefiles, ignore_errors=True)
        for module in MODULES:
            path = self.modulefiles / f"{module}.lua"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(MODULEFILE.format(version=VERSION, bin=self.bin_dir))
        os.chmod(self.modulefiles, 0o755)

    def _stop(self) -> None:
        """Files and an id range: nothing runs, nothing to stop."""
