"""Site profiles as plain data (``--json``) and as text with each value's provenance tag."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..outside import shown
from .model import Site

_TAG_MARK = {"verified": "V", "seed": "D", "uncertain": "U"}


def site_summary(site: Site) -> dict[str, Any]:
    return {"name": site.name, "description": site.description, "scheduler": site.scheduler,
            "default_partition": site.default_partition, "runtimes": [r.kind for r in site.runtimes],
            "compute_internet": site.compute_internet, "path": str(site.path) if site.path else None}


def site_data(site: Site) -> dict[str, Any]:
    data = asdict(site)
    data["path"] = str(site.path) if site.path else None
    data["env"] = dict(site.env)
    data["partitions"] = {p["name"]: {k: v for k, v in p.items() if k != "name"} for p in data["partitions"]}
    data["facts"] = {f.key: {"tag": f.tag, "source": f.source, "note": f.note} for f in site.facts}
    data["doctor"] = dict(site.doctor)
    if site.platform:
        data["platform"]["npu_env"] = dict(site.platform.npu_env)
    return data


def _tag(site: Site, key: str) -> str:
    fact = site.fact(key)
    return f"[{_TAG_MARK[fact.tag]}]" if fact else "[ ]"


def _line(site: Site, key: str, label: str, value: Any) -> str:
    return f"{_tag(site, key)} {label}: {value}"


def _runtime_lines(site: Site) -> list[str]:
    """Each runtime with its module and version; what a .sif for the site gets from them."""
    out = []
    for index, runtime in enumerate(site.runtimes):
        extra = f" (module {runtime.module})" if runtime.module else ""
        extra += " (default)" if index == 0 else ""
        out.append(_line(site, "runtimes", "runtime", f"{runtime.kind}{extra}"))
        if runtime.version or runtime in site.sif_runtimes():
            out.append(_line(site, f"runtimes.{index}.version", f"{runtime.kind} version",
                             runtime.version or "not given (ckit writes for any)"))
        if runtime.enroot:
            out.append(_line(site, f"runtimes.{index}.enroot", "enroot version", runtime.enroot))
        if runtime.importer:
            out.append(_line(site, f"runtimes.{index}.importer", "pyxis importer", runtime.importer))
        if runtime.squashfuse:
            out.append(_line(site, f"runtimes.{index}.squashfuse", "pyxis use_squashfuse",
                             "1: jobs start straight from the .sqsh, which ckit writes lz4:1 for squashfuse to read"))
    if site.sif_runtimes():
        out.append(f"    a .sif for the site: squashfs {', '.join(site.compressions('sif'))}; ORAS layer "
                   f"{site.sif_layer_type()}")
    return out


def site_text(site: Site) -> str:
    """Every value of the profile, each prefixed by its tag ([V] verified, [D] seed only, [U] uncertain)."""
    out = [f"{site.name}: {site.description}", f"profile: {site.path}", ""]
    out.append(_line(site, "scheduler", "scheduler", site.scheduler))
    if site.login:
        out.append(_line(site, "login", "login", site.login))
    out += _partition_lines(site)
    out += _runtime_lines(site)
    out += _setting_lines(site)
    out += [_line(site, f"env.{name}", "env", f"{name}={value}") for name, value in site.env]
    out += _policy_lines(site)
    out += _platform_lines(site)
    out += _source_lines(site)
    out += _doctor_lines(site)
    out += ["", "tags: [V] verified in a cited source, [D] only in a seed guide, [U] uncertain, [ ] untagged"]
    return "\n".join(shown(line) for line in out) + "\n"  # one line per value, whatever the profile's text holds


def _partition_lines(site: Site) -> list[str]:
    out = []
    for part in site.partitions:
        marks = " (default)" if part.name == site.default_partition else ""
        fields = [f"{part.gpus_per_node} GPU" + (f" {part.gpu_type}" if part.gpu_type else "")]
        fields += [f"{part.cpus_per_node} CPUs"] if part.cpus_per_node else []
        fields += [f"{part.mem_per_node_mb} MB"] if part.mem_per_node_mb else []
        fields += [f"max {part.max_time}"] if part.max_time else []
        fields += [f"{part.max_jobs_per_user} jobs/user"] if part.max_jobs_per_user else []
        fields += [f"{part.max_gpus_per_user} GPUs/user"] if part.max_gpus_per_user else []
        fields += [part.arch] if part.arch != "x86_64" else []
        fields += [part.note] if part.note else []
        out.append(_line(site, f"partitions.{part.name}", f"partition {part.name}{marks}", ", ".join(fields)))
    for name, why in site.retired_partitions:
        out.append(_line(site, "retired_partitions", f"partition {name} (gone)", why))
    return out


def _setting_lines(site: Site) -> list[str]:
    """The site-wide settings that have a value."""
    settings: list[tuple[str, str, object]] = [
        ("mpi_plugin", "srun --mpi", site.mpi_plugin),
        ("network_interface", "network interface", site.network_interface),
        ("modules", "modules", " ".join(site.modules)),
        ("conda", "conda env", site.conda), ("venv", "venv", site.venv),
        ("rank_table", "MindSpore rank table", site.rank_table),
        ("mounts", "mounts", " ".join(site.mounts)),
        ("shared_image_dir", "shared image folder", site.shared_image_dir),
        ("compute_internet", "compute nodes have internet", "yes" if site.compute_internet else "no"),
        ("squashfs_compressions", "squashfs compressions", ", ".join(site.squashfs_compressions) or "any"),
        ("nccl_busbw", "nccl-tests bus bandwidth measured",
         ", ".join(f"{gbps:g} GB/s on {nodes} node{'s' if nodes > 1 else ''}" for nodes, gbps in site.nccl_busbw))]
    return [_line(site, key, label, value) for key, label, value in settings if value]


def _policy_lines(site: Site) -> list[str]:
    """The site's rules that are set."""
    policy = site.policy
    rules: list[tuple[str, str, object]] = [
        ("policy.require_account", "requires --account", policy.require_account),
        ("policy.require_comment", "requires --comment", policy.require_comment),
        ("policy.comment_choices", "--comment one of", " ".join(policy.comment_choices)),
        ("policy.forbid_options", "forbidden options", " ".join("--" + o for o in policy.forbid_options)),
        ("policy.cpus_per_gpu", "CPUs per GPU (max)", policy.cpus_per_gpu),
        ("policy.mem_per_gpu_gb", "GB memory per GPU", policy.mem_per_gpu_gb),
        ("policy.min_gpus_per_job", "GPUs per job (min)", policy.min_gpus_per_job),
        ("policy.submit_from", "submit from", policy.submit_from)]
    return [_line(site, key, f"rule: {label}", "yes" if rule is True else rule) for key, label, rule in rules if rule]


def _platform_lines(site: Site) -> list[str]:
    """A platform's (DLWS) settings that have a value."""
    plat = site.platform
    if not plat:
        return []
    values = [("hostfile", "hostfile", plat.hostfile), ("ssh_port_var", "SSH port variable", "$" + plat.ssh_port_var),
              ("rank_table", "NPU rank table", plat.rank_table),
              ("device_types", "device types", ", ".join(plat.device_types))]
    return [_line(site, f"platform.{key}", f"platform {label}", value) for key, label, value in values if value]


def _doctor_lines(site: Site) -> list[str]:
    """What the last ``ckit doctor`` proved on the site, or that none ran (every value is then as read or told)."""
    if site.doctor_date is None:
        return ["", f"doctor: never run on this profile (ckit doctor --site {site.name} proves its runtimes)"]
    verified = [f.key for f in site.facts if f.source.startswith("ckit doctor")]
    return ["", f"doctor ({site.doctor_date}): " + ", ".join(f"{name} {status}" for name, status in site.doctor),
            "  verified by it: " + (", ".join(verified) or "nothing")]


def _source_lines(site: Site) -> list[str]:
    """Where each value came from, for the values that name a source or carry a note."""
    sources = [f for f in site.facts if f.source or f.note]
    if not sources:
        return []
    return ["", "sources:"] + [f"  {f.key} [{_TAG_MARK[f.tag]}]: " + "; ".join(x for x in (f.source, f.note) if x)
                               for f in sources]
