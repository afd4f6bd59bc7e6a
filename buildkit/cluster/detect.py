"""``ckit sites detect``: a site profile built from what the cluster answered (:mod:`.answers`), every value
tagged with where it came from; nothing the cluster did not say is written, except ``none`` as the last runtime
(a job may always run its program directly)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import slurmtext
from .answers import Answers
from .probe import Probe, parse

# the order of a detected profile's runtimes: the first is the default of a job with --image
RUNTIME_ORDER = ("pyxis", "apptainer", "singularity", "charliecloud", "podman")
_MODULE_OF = {"apptainer": "apptainer", "singularity": "singularity", "pyxis": "enroot",
              "charliecloud": "charliecloud", "podman": "podman"}
_VERSION_KEY = {"charliecloud": "charliecloud", "pyxis": "enroot"}


@dataclass(frozen=True)
class Detection:
    """A detected profile (the YAML's data), what else was seen, and its differences from a profile given."""

    name: str
    profile: dict[str, Any]
    notes: tuple[str, ...] = ()
    diff: tuple[str, ...] = ()
    path: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "profile": self.profile, "notes": list(self.notes), "diff": list(self.diff),
                "path": self.path}


def _fact(tag: str, source: str, note: str = "") -> dict[str, str]:
    return {"tag": tag, "source": source, **({"note": note} if note else {})}


def _partitions(answers: Answers, today: str) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
    """The partitions, the default one, and their facts, from scontrol's partition and node records."""
    nodes = slurmtext.records(answers.nodes)
    parts: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    default = None
    for record in slurmtext.records(answers.partitions):
        name = record.get("PartitionName", "")
        if not name or record.get("Hidden") == "YES":
            continue
        members = [n for n in nodes if name in (n.get("Partitions") or "").split(",")]
        entry, note = _partition(record, members)
        parts[name] = entry
        default = name if record.get("Default") == "YES" else default
        facts[f"partitions.{name}"] = _fact("verified", f"scontrol show partition/node, {today}", note)
    if parts and default is None:
        default = next(iter(parts))
        facts["default_partition"] = _fact("uncertain", "scontrol: no partition is Default=YES",
                                           "ckit's choice: the first partition")
    return parts, default, facts


def _partition(record: dict[str, str], members: list[dict[str, str]]) -> tuple[dict[str, Any], str]:
    gres = [slurmtext.gpus(slurmtext.value(n, "Gres")) for n in members]
    mems = [m for n in members if (m := slurmtext.memory_mb(n.get("RealMemory")))]
    entry: dict[str, Any] = {"gpus_per_node": min((g.count for g in gres), default=0)}
    types = {g.type for g in gres if g.type}
    if entry["gpus_per_node"] and len(types) == 1:
        entry["gpu_type"] = types.pop()
    cpu_counts = [int(n["CPUTot"]) for n in members if (n.get("CPUTot") or "").isascii()
                  and (n.get("CPUTot") or "").isdigit()]
    if cpu_counts:
        entry["cpus_per_node"] = min(cpu_counts)
    if mems and len(mems) == len(members):
        entry["mem_per_node_mb"] = min(mems)
    if limit := slurmtext.max_time(record.get("MaxTime")):
        entry["max_time"] = limit
    if node_list := slurmtext.value(record, "Nodes"):
        entry["nodes"] = node_list
    arches = {n.get("Arch") for n in members}
    if arches == {"aarch64"}:
        entry["arch"] = "aarch64"
    notes = []
    if members and len(mems) < len(members):
        notes.append("memory not configured in slurm.conf (RealMemory=1): not given")
    if len({g.count for g in gres}) > 1:
        notes.append("its nodes differ in GPUs: the fewest given")
    return entry, "; ".join(notes)


def _runtimes(compute: Probe, login: Probe, plugstack: str, today: str, where: str
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The runtimes the compute node has (or, when the probe job did not run, the login node, uncertain), then a
    runtime a module loads there; ``none`` last."""
    node = compute if compute.complete else login
    tag = "verified" if compute.complete else "uncertain"
    found: list[dict[str, Any]] = []
    facts: dict[str, Any] = {}
    for kind in RUNTIME_ORDER:
        entry: dict[str, Any] = {"kind": kind}
        if node.flavours.get(kind) in node.runtimes():
            continue  # Apptainer's `singularity` alias: one runtime, listed once, by its own name
        if kind not in node.runtimes():
            module = _module_for(kind, node)
            if module is None:
                continue
            entry["module"] = module
        version = node.versions.get(_VERSION_KEY.get(kind, kind))
        if kind == "pyxis":
            entry.update(_pyxis_options(plugstack))
            if version:
                entry["enroot"] = version
        elif version:
            entry["version"] = version
        index = len(found)
        found.append(entry)
        source = f"probe on {where if compute.complete else 'the login node ' + login.host}, {today}"
        facts[f"runtimes.{index}"] = _fact(tag if "module" not in entry else "uncertain", source,
                                           f"loaded by module {entry['module']}" if "module" in entry else "")
    found.append({"kind": "none"})
    return found, facts


def _module_for(kind: str, node: Probe) -> str | None:
    """The newest-listed module named after the runtime (``apptainer/1.3.4``), when the node has no such program."""
    word = _MODULE_OF[kind]
    names = [m for m in node.modules or () if m.lower().split("/")[0] == word and not m.endswith(":")]
    return names[-1].rstrip("/") if names else None


def _pyxis_options(plugstack: str) -> dict[str, Any]:
    """importer= and use_squashfuse=1 from the plugstack lines that load pyxis."""
    out: dict[str, Any] = {}
    for word in plugstack.split():
        if word.startswith("importer="):
            out["importer"] = "ckit" if "ckit" in word else "other"
        if word == "use_squashfuse=1":
            out["squashfuse"] = True
    if out:
        out["version"] = "0.24" if out.get("squashfuse") and "importer" in out else \
            "0.22" if out.get("squashfuse") else "0.21"
    return out


def _shared_folder(answers: Answers, compute: Probe) -> str | None:
    for marker, folder in answers.markers.items():
        if marker in compute.seen:
            return f"{folder.rstrip('/')}/ckit-images"
    return None


def _policy(answers: Answers, today: str) -> tuple[dict[str, Any], dict[str, Any]]:
    refused = slurmtext.test_only_refusal(answers.test_only.stderr) if answers.test_only else None
    policy = {"require_account": True} if refused == "account" else \
        {"require_comment": True} if refused == "comment" else {}
    facts: dict[str, Any] = {}
    assoc = slurmtext.associations(answers.associations)
    qos = "; ".join(f"{a} (QOS {', '.join(q) or 'none'})" for a, q in assoc)
    if policy:
        key = next(iter(policy))
        facts[f"policy.{key}"] = _fact("verified", f"sbatch --test-only without it was refused, {today}",
                                       f"your accounts: {qos}" if qos else "")
    return policy, facts


def build(name: str, answers: Answers, *, today: str | None = None) -> Detection:
    """The profile the answers give, and notes on what they showed that no key holds (conda, modules, QOS)."""
    today = today or datetime.date.today().isoformat()
    login, compute = parse(answers.login_probe), parse(answers.compute_probe)
    parts, default, facts = _partitions(answers, today)
    where = f"compute node {compute.host}" if compute.complete else "the login node"
    runtimes, runtime_facts = _runtimes(compute, login, answers.plugstack, today, where)
    plugins = slurmtext.mpi_plugins(answers.mpi_list)
    mpi = "pmi2" if "pmi2" in plugins else "pmix" if any(p.startswith("pmix") for p in plugins) else "none"
    shared = _shared_folder(answers, compute)
    internet = compute.reaches_registry if compute.complete else None
    profile: dict[str, Any] = {
        "name": name, "description": f"Detected by ckit sites detect on {login.host or 'the login node'} ({today})",
        "scheduler": "slurm", "login": login.host or None, "partitions": parts, "default_partition": default,
        "runtimes": runtimes, "mpi_plugin": mpi, "shared_image_dir": shared, "compute_internet": bool(internet),
        "squashfs_compressions": []}
    policy, policy_facts = _policy(answers, today)
    if policy:
        profile["policy"] = policy
    profile = {k: v for k, v in profile.items() if v is not None or k == "shared_image_dir"}
    facts.update(runtime_facts)
    facts.update(policy_facts)
    facts.update(_site_facts(answers, compute, shared, internet, plugins, today))
    profile["facts"] = facts
    return Detection(name, profile, _notes(answers, login, compute))


def _site_facts(answers: Answers, compute: Probe, shared: str | None, internet: bool | None,
                plugins: tuple[str, ...], today: str) -> dict[str, Any]:
    facts = {"scheduler": _fact("verified", f"scontrol answered on the login node, {today}"),
             "mpi_plugin": _fact("verified" if plugins else "uncertain", f"srun --mpi=list: {', '.join(plugins)}"
                                 if plugins else "srun --mpi=list gave no plugin", "pmi2 preferred when listed")}
    if shared:
        facts["shared_image_dir"] = _fact("verified", f"a file written here was seen on {compute.host}, {today}",
                                          f"file system {compute.filesystems.get(shared.rsplit('/', 1)[0], '?')}")
    else:
        facts["shared_image_dir"] = _fact("uncertain", "no folder tried was seen from a compute node",
                                          "set a folder every node reads for staged images")
    facts["compute_internet"] = _fact("verified" if internet is not None else "uncertain",
                                      f"probe job: registry answered HTTP {compute.internet}" if internet is not None
                                      else "the probe job did not run or had no curl", "")
    facts["squashfs_compressions"] = _fact("uncertain", "not probed", "empty means any; the nodes' kernel decides")
    return facts


def _notes(answers: Answers, login: Probe, compute: Probe) -> tuple[str, ...]:
    notes = []
    if not compute.complete:
        notes.append(f"the compute-node probe did not run ({answers.compute_error or 'no answer'}): runtimes are "
                     "the login node's (tagged uncertain)")
    node = compute if compute.complete else login
    if node.conda_envs:
        notes.append("conda environments: " + ", ".join(node.conda_envs) + " (set conda: to activate one in every job)")
    if node.modules:
        notes.append("modules: " + ", ".join(node.modules))
    if node.gpus:
        notes.append("GPUs on " + node.host + ": " + "; ".join(node.gpus))
    for account, qos in slurmtext.associations(answers.associations):
        notes.append(f"account {account}: QOS {', '.join(qos) or 'none'}")
    for folder, kind in sorted(node.filesystems.items()):
        notes.append(f"file system of {folder} on {node.host}: {kind}")
    return tuple(notes)


def diff(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, ...]:
    """The values that differ between an existing profile and the detected one, as ``key: old -> new`` lines
    (facts and the description left out)."""
    flat_old, flat_new = _flatten(old), _flatten(new)
    keys = sorted(set(flat_old) | set(flat_new))
    return tuple(f"{key}: {flat_old.get(key, '(absent)')} -> {flat_new.get(key, '(absent)')}"
                 for key in keys if flat_old.get(key) != flat_new.get(key)
                 and not key.startswith(("facts", "description", "name", "doctor")))


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, val in data.items():
            out.update(_flatten(val, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(data, list) and data and all(isinstance(v, dict) for v in data):
        out = {}
        for index, val in enumerate(data):
            out.update(_flatten(val, f"{prefix}.{index}"))
        return out
    return {prefix: data}


def render(detection: Detection) -> str:
    """The profile as YAML, with a header saying how it was made."""
    import yaml

    head = (f"# Detected by `ckit sites detect {detection.name}`; values are tagged in facts: (verified: the cluster\n"
            "# said so; uncertain: check it). `ckit doctor --site NAME` proves the runtimes on the nodes.\n")
    return head + yaml.safe_dump(detection.profile, sort_keys=False, default_flow_style=False, width=110)


def write(detection: Detection, output: str) -> str:
    """Write the profile to ``output`` (a file NAME.yaml, or a folder for it) once it loads as a valid profile;
    nothing is written when it does not."""
    import os
    import tempfile

    from ..fs.files import atomic_write, check_output
    from ..site.load import load_site_file

    path = Path(output)
    if path.is_dir():
        path = path / f"{detection.name}.yaml"
    if path.stem != detection.name:
        from ..errors import ConfigError

        raise ConfigError(f"-o {output}: a profile's file is named after the site ({detection.name}.yaml)",
                          hint=f"-o {path.parent / (detection.name + '.yaml')}, or give the name as NAME")
    check_output(path, flag="-o")
    text = render(detection)
    with tempfile.TemporaryDirectory() as tmp:
        trial = Path(tmp) / path.name
        trial.write_text(text)
        load_site_file(trial)  # a profile ckit would refuse is never written
    atomic_write(path, text.encode())
    return os.fspath(path)
