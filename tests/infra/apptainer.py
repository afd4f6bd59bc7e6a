"""Apptainer as the Singularity sites run it: Debian's own package, the real runtime of the ``.sif`` tests.

Debian 12 carries no Apptainer; Debian's unstable suite does (1.4.5), built for its newer glibc. So this component
makes a root of Debian unstable's packages with mmdebstrap (``apptainer``, and ``squashfuse`` for users without
loop devices), cached in the test cache (about 270 MB, 15-30 s on a warm mirror), and puts two commands,
``apptainer`` and ``singularity`` (the package's own alias), in ``RUN/apptainer/bin``. Each starts the program
inside that root: a private mount namespace (a user namespace too, for users other than root) where the host's
``/dev``, ``/proc``, ``/sys``, its data folders (every top-level folder that is not the system's: ``/tmp``,
``/root``, ``/home``, ``/work``…), ``/var/tmp`` and the account files of ``/etc`` are bound into the root, then
``pivot_root`` into it (Apptainer refuses a plain chroot). So paths mean the same inside as outside, and a job on
a namespaced Slurm node sees that node's ``/etc/hosts`` and ``/tmp``.

On top, what the sites' job scripts and ``ckit build --engine apptainer`` need:

* Lmod modules under the names the site profiles load (``singularity`` and ``singularity/3.11.0`` of twnia2 and
  neuron, ``Singularity`` of tara, ``apptainer/1.4``), each putting ``RUN/apptainer/bin`` on PATH: the scripts run
  as ckit writes them (``module load …``), only MODULEPATH (``modulefiles``) points here;
* ``root default capabilities = no`` in the root's apptainer.conf: root on these machines lacks CAP_SYS_RESOURCE,
  and Apptainer would otherwise keep every capability for root's containers and fail (what ``--no-privs`` does
  per command, for the site lines that do not say it);
* ``/dev/fuse`` usable by every user (unprivileged Apptainer mounts a ``.sif`` with squashfuse);
* a subordinate id range for root in /etc/subuid and /etc/subgid: root here lacks CAP_SYS_RESOURCE in its
  bounding set, so ckit builds with ``--fakeroot`` (see buildkit/engine/apptainer.py), which needs it.

Nothing runs: there is nothing to stop.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from .daemon import Component, ComponentError, run
from .images import CACHE_DIR, DEBIAN_MIRROR

VERSION = "1.4.5"
PACKAGES = ("apptainer", "squashfuse")
ROOT = CACHE_DIR / "apptainer-root"
STAMP = ROOT / ".ckit-apptainer"  # written last: a root without it is incomplete and made again
# the module names the built-in site profiles load (sites/*.yaml runtimes[].module)
MODULES = ("singularity/3.11.0", "Singularity/3.4.2", "apptainer/1.4")
MODULEFILE = """\
help([[Apptainer {version} of ckit's tests (Debian's package), under the name a site's profile loads]])
whatis("Apptainer {version}")
prepend_path("PATH", "{bin}")
"""
SUBID_RANGE = "1000000:65536"  # root's, for `apptainer build --fakeroot`
SUBID_FILES = (Path("/etc/subuid"), Path("/etc/subgid"))
ACCOUNT_FILES = ("passwd", "group", "hosts", "resolv.conf", "subuid", "subgid")
# the host's own folders, which the root has in its own version; every other top-level folder is data, bound in
SYSTEM = "/bin|/boot|/etc|/lib|/lib32|/lib64|/libx32|/sbin|/usr|/var|/proc|/sys|/dev|/lost+found|/.oldroot"

ENTER = """\
#!/bin/bash
# Runs in a private mount namespace, with whatever PATH a job has (hence full paths) (see tests/infra/apptainer.py): bind the host's data into the Apptainer root,
# pivot into it, and run the program there as the caller.
set -euo pipefail
R={root}
prog=$1; shift
cwd=$PWD
uid=${{CKIT_APPTAINER_UID:-}} gid=${{CKIT_APPTAINER_GID:-}}
unset CKIT_APPTAINER_UID CKIT_APPTAINER_GID
/usr/bin/mount --bind "$R" "$R"
for d in dev proc sys; do /usr/bin/mount --rbind "/$d" "$R/$d"; done
for d in /*/; do
  d=${{d%/}}
  case "$d" in {system}) continue;; esac
  [ -d "$R$d" ] || continue  # a folder made after the root was: the component adds it at its next start
  /usr/bin/mount --rbind "$d" "$R$d"
done
/usr/bin/mount --rbind /var/tmp "$R/var/tmp"
for f in {account}; do
  if [ -e "/etc/$f" ]; then /usr/bin/mount --bind "/etc/$f" "$R/etc/$f"; fi
done
cd "$R"
/usr/sbin/pivot_root . .oldroot
/usr/bin/umount -l /.oldroot  # from here on, every program is the root's own
cd "$cwd" 2>/dev/null || cd /
# a user other than root entered as root of a user namespace (to mount): back to their own ids for the program
# (the root's own binary by its path: PATH may name this wrapper's folder, which is bound in too)
[ -z "$uid" ] || exec /usr/bin/unshare --user --map-user="$uid" --map-group="$gid" -- "/usr/bin/$prog" "$@"
exec "/usr/bin/$prog" "$@"
"""

COMMAND = """\
#!/bin/bash
# {name}: Debian's Apptainer {version} from {root}, entered by {enter} (tests/infra/apptainer.py)
if [ "$(id -u)" = 0 ]; then
  exec /usr/bin/unshare --mount --propagation private {enter} {name} "$@"
fi
CKIT_APPTAINER_UID=$(id -u) CKIT_APPTAINER_GID=$(id -g) \\
  exec /usr/bin/unshare --user --map-root-user --mount --propagation private {enter} {name} "$@"
"""


def enter_text() -> str:
    return ENTER.format(root=ROOT, system=SYSTEM, account=" ".join(ACCOUNT_FILES))


def subids_missing() -> list[Path]:
    return [f for f in SUBID_FILES if not any(line.startswith("root:") for line in
                                              (f.read_text().splitlines() if f.is_file() else []))]


def data_folders() -> list[Path]:
    """The host's top-level folders bound into the root (the same test as ENTER's)."""
    system = set(SYSTEM.split("|"))
    return [p for p in Path("/").iterdir() if p.is_dir() and not p.is_symlink() and str(p) not in system]


class Apptainer(Component):
    name = "apptainer"

    @property
    def home(self) -> Path:
        return self.run / "apptainer"

    @property
    def bin_dir(self) -> Path:
        return self.home / "bin"

    @property
    def binary(self) -> Path:
        """``apptainer`` as a user's PATH has it (``bin_dir / 'singularity'`` is the sites' name)."""
        return self.bin_dir / "apptainer"

    @property
    def modulefiles(self) -> Path:
        return self.home / "modulefiles"

    def __call__(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
                 timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``apptainer ARGS`` as a user runs it (this environment plus ``env``)."""
        return subprocess.run([str(self.binary), *args], capture_output=True, text=True, timeout=timeout,  # noqa: S603
                              env={**os.environ, **(env or {})}, cwd=cwd, check=False)

    def version(self) -> str:
        return run([str(self.binary), "--version"], timeout=60).stdout.decode().strip()

    def healthy(self) -> bool:
        enter = self.home / "enter"
        return (STAMP.is_file() and not subids_missing() and enter.is_file() and enter.read_text() == enter_text()
                and self.binary.is_file() and (self.bin_dir / "singularity").is_file()
                and all((ROOT / p.name).is_dir() for p in data_folders())
                and Path("/dev/fuse").exists() and stat.S_IMODE(Path("/dev/fuse").stat().st_mode) & 0o006 == 0o006
                and all((self.modulefiles / f"{m}.lua").is_file() for m in MODULES))

    def _start(self) -> None:
        if not STAMP.is_file():
            make_root()
        for folder in data_folders():  # made since the root was (a checkout's top folder, say)
            (ROOT / folder.name).mkdir(exist_ok=True)
        if not Path("/dev/fuse").exists():
            raise ComponentError("/dev/fuse is missing: load the fuse module (modprobe fuse)")
        os.chmod("/dev/fuse", 0o666)
        for path in subids_missing():
            with path.open("a") as handle:
                handle.write(f"root:{SUBID_RANGE}\n")
            self.journal(f"root:{SUBID_RANGE} added to {path} (apptainer build --fakeroot as root)")
        self._write_commands()
        seen = self.version()
        if seen != f"apptainer version {VERSION}":
            raise ComponentError(f"{self.binary} says {seen!r}, not apptainer version {VERSION}: remove {ROOT} "
                                 "and start again (Debian unstable moved on: update VERSION in tests/infra/apptainer.py)")

    def _write_commands(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)
        self.bin_dir.mkdir(parents=True)
        enter = self.home / "enter"
        enter.write_text(enter_text())
        for name in ("apptainer", "singularity"):
            (self.bin_dir / name).write_text(COMMAND.format(name=name, version=VERSION, root=ROOT, enter=enter))
        for path in (enter, *self.bin_dir.iterdir()):
            path.chmod(0o755)
        for module in MODULES:
            path = self.modulefiles / f"{module}.lua"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(MODULEFILE.format(version=VERSION, bin=self.bin_dir))
        for folder in (self.home, self.bin_dir, self.modulefiles, *self.modulefiles.iterdir()):
            folder.chmod(0o755)

    def _stop(self) -> None:
        """Files in the run dir and a cached root: nothing runs, nothing to stop."""


def make_root() -> None:
    """Debian unstable's ``apptainer`` into ROOT, with the mount points and the config the commands need."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(ROOT, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        tar, part = Path(tmp) / "root.tar", Path(tmp) / "root"
        # the unstable suite's Release file can be past its Valid-Until date on a mirror snapshot
        run(["mmdebstrap", "--variant=minbase", "--aptopt=Acquire::Check-Valid-Until \"false\"",
             f"--include={','.join(PACKAGES)}", "sid", str(tar), DEBIAN_MIRROR], timeout=900)
        part.mkdir()
        run(["tar", "-C", str(part), "--numeric-owner", "-xpf", str(tar)], timeout=300)
        conf = part / "etc/apptainer/apptainer.conf"
        text = conf.read_text()
        if "root default capabilities = full" not in text:
            raise ComponentError(f"{conf} has no 'root default capabilities = full' line to turn off")
        conf.write_text(text.replace("root default capabilities = full", "root default capabilities = no"))
        (part / ".oldroot").mkdir()
        for name in ACCOUNT_FILES:
            (part / "etc" / name).touch()
        (part / STAMP.name).write_text(f"apptainer {VERSION} from Debian unstable\n")
        part.rename(ROOT)
