"""What a node has, asked by one POSIX shell script: the runtimes and their versions, squashfuse, environment modules,
conda, the file systems of the usual folders, the GPUs, whether a registry answers. It runs on the login node
(``sh -c``) and in a one-task job on a compute node; each answer is a ``ckit-probe KEY VALUE`` line, read by
:func:`parse` (the one reader of that form)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# The programs whose presence is a runtime (or what one needs); a name is printed with its path when found.
PROGRAMS = ("apptainer", "singularity", "enroot", "ch-run", "podman", "squashfuse", "squashfuse_ll", "conda",
            "nvidia-smi", "srun", "python3")
# Module names that load a runtime or conda (matched case-blind in `module -t avail`)
MODULE_WORDS = ("apptainer", "singularity", "enroot", "charliecloud", "podman", "conda", "anaconda", "miniconda",
                "miniforge", "cuda")
# Answered by any registry (401 without a token): that the nodes reach one, not that an image is there
DEFAULT_REGISTRY_URL = "https://registry-1.docker.io/v2/"

SCRIPT = r"""
p() { printf 'ckit-probe %s %s\n' "$1" "$(printf '%s' "$2" | tr '\n' ' ')"; }
p host "$(hostname 2>/dev/null || uname -n)"
p arch "$(uname -m)"
for t in PROGRAMS; do w=$(command -v "$t" 2>/dev/null) && p "have.$t" "$w"; done
command -v apptainer >/dev/null 2>&1 && p version.apptainer "$(apptainer --version 2>/dev/null)"
command -v singularity >/dev/null 2>&1 && p version.singularity "$(singularity --version 2>/dev/null)"
command -v enroot >/dev/null 2>&1 && p version.enroot "$(enroot version 2>/dev/null)"
command -v ch-run >/dev/null 2>&1 && p version.charliecloud "$(USER="${USER:-$(id -un)}" ch-run --version 2>&1)"
command -v podman >/dev/null 2>&1 && p version.podman "$(podman --version 2>/dev/null)"
command -v srun >/dev/null 2>&1 && srun --help 2>/dev/null | grep -q -e '--container-image' && p pyxis yes
for d in "$HOME" "${SCRATCH:-}" "${WORK:-}" /scratch /work /lustre /gpfs "/scratch/${USER:-}" MARKER_DIRS; do
  [ -n "$d" ] && [ -d "$d" ] && p "fs.$d" "$(stat -f -c %T "$d" 2>/dev/null)"
done
for m in MARKERS; do [ -e "$m" ] && p seen "$m"; done
if ! type module >/dev/null 2>&1; then
  for f in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh /usr/share/lmod/lmod/init/sh /usr/share/modules/init/sh; do
    if [ -r "$f" ]; then . "$f" >/dev/null 2>&1; break; fi
  done
fi
if type module >/dev/null 2>&1; then
  p modules yes
  module -t avail 2>&1 | grep -i -E 'MODULE_WORDS' | head -n 40 | while read -r m; do p module "$m"; done
fi
command -v conda >/dev/null 2>&1 && conda env list 2>/dev/null | grep -v '^#' | while read -r e _; do
  [ -n "$e" ] && p conda.env "$e"; done
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader \
  2>/dev/null | while read -r g; do p gpu "$g"; done
if command -v curl >/dev/null 2>&1; then
  p internet "$(curl -s -o /dev/null -m 8 -w '%{http_code}' REGISTRY_URL 2>/dev/null)"
fi
p done yes
"""


def script(markers: tuple[str, ...] = (), registry_url: str = DEFAULT_REGISTRY_URL) -> str:
    """The probe for one node; ``markers`` are files the login node wrote, seen only where their folder is
    shared. Every value put in is a path ckit made or a URL the user gave, quoted for the shell."""
    from ..launch.shell import q

    dirs = " ".join(q(m.rsplit("/", 1)[0]) for m in markers)
    return (SCRIPT.replace("PROGRAMS", " ".join(PROGRAMS)).replace("MODULE_WORDS", "|".join(MODULE_WORDS))
            .replace("MARKER_DIRS", dirs).replace("MARKERS", " ".join(q(m) for m in markers) or "''")
            .replace("REGISTRY_URL", q(registry_url)))


@dataclass(frozen=True)
class Probe:
    """One node's answers."""

    host: str = ""
    arch: str = ""
    programs: dict[str, str] = field(default_factory=dict)  # name -> path
    versions: dict[str, str] = field(default_factory=dict)  # apptainer -> "1.3.4", …
    # what a command says it is, where that is not its name: Apptainer installs `singularity` as its alias
    flavours: dict[str, str] = field(default_factory=dict)  # singularity -> "apptainer"
    pyxis: bool = False
    filesystems: dict[str, str] = field(default_factory=dict)  # folder -> type (nfs, lustre, ext2/ext3, …)
    seen: tuple[str, ...] = ()  # the markers this node sees
    modules: tuple[str, ...] | None = None  # None: no module command
    conda_envs: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()  # "NVIDIA A100-SXM4-40GB, 535.104.05"
    internet: str | None = None  # the HTTP status the registry URL answered ("000": none); None: no curl
    complete: bool = False  # the script ran to its end

    def runtimes(self) -> tuple[str, ...]:
        """The runtime kinds this node can run (a runtime backend's name)."""
        kinds = [kind for kind, program in (("apptainer", "apptainer"), ("singularity", "singularity"),
                                            ("charliecloud", "ch-run"), ("podman", "podman"))
                 if program in self.programs]
        if self.pyxis and "enroot" in self.programs:
            kinds.append("pyxis")
        return tuple(kinds)

    @property
    def reaches_registry(self) -> bool | None:
        if self.internet is None:
            return None
        return self.internet not in ("", "000")


_VERSION = re.compile(r"([0-9]+\.[0-9]+(\.[0-9]+)?)")


def version_of(text: str) -> str | None:
    """``apptainer version 1.3.4`` → 1.3.4; ``singularity-ce version 3.11.4-jammy`` → 3.11.4."""
    found = _VERSION.search(text)
    return found.group(1) if found else None


def parse(text: str) -> Probe:
    """The probe's lines (anything else in the output, a login banner or a module's chatter, is skipped)."""
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "ckit-probe":
            key, _, val = rest.partition(" ")
            values.setdefault(key, []).append(val.strip())
    one = {key: vals[-1] for key, vals in values.items()}
    versions = {key.removeprefix("version."): v for key, val in one.items()
                if key.startswith("version.") and (v := version_of(val))}
    return Probe(
        host=one.get("host", ""), arch=one.get("arch", ""),
        programs={k.removeprefix("have."): v for k, v in one.items() if k.startswith("have.")},
        versions=versions, pyxis=one.get("pyxis") == "yes",
        flavours={key.removeprefix("version."): "apptainer" for key, val in one.items()
                  if key == "version.singularity" and val.startswith("apptainer ")},
        filesystems={k.removeprefix("fs."): v for k, v in one.items() if k.startswith("fs.")},
        seen=tuple(values.get("seen", ())),
        modules=tuple(values.get("module", ())) if "modules" in one else None,
        conda_envs=tuple(values.get("conda.env", ())), gpus=tuple(values.get("gpu", ())),
        internet=one.get("internet"), complete="done" in one)
