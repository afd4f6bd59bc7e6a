"""Find, validate and build site profiles from layered folders (``--sites DIR``, ``CKIT_SITES_PATH``, built-ins)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import yamlfile
from ..config.searchpath import SearchPath, suggest
from ..outside import ascii_int
from .compat import OLDEST_SIF_RUNTIME, parse_version, pyxis_lacks, runs_sif
from .model import Fact, Partition, Platform, Policy, Runtime, Site
from .schema import SITE_SCHEMA

ENV_VAR = "CKIT_SITES_PATH"


def _search(sites_dirs: Sequence[Path]) -> SearchPath:
    return SearchPath.build("sites", sites_dirs, ENV_VAR)


def load_site(name: str, sites_dirs: Sequence[Path] = ()) -> Site:
    """The site profile ``name`` from the first folder that holds ``name.yaml``."""
    return load_site_file(_search(sites_dirs).require("", name, what="site"))


def list_sites(sites_dirs: Sequence[Path] = ()) -> list[Site]:
    search = _search(sites_dirs)
    return [load_site_file(search.require("", name, what="site")) for name in search.names()]


def load_site_file(path: Path) -> Site:
    doc = yamlfile.load(path)
    yamlfile.validate(doc, SITE_SCHEMA, kind="site profile")
    _check(doc)
    return _build(doc.data, path)


def _has_keypath(data: Any, parts: list[str]) -> bool:
    for part in parts:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and (index := ascii_int(part)) is not None and index < len(data):
            data = data[index]
        else:
            return False
    return True


def _check(doc: yamlfile.Document) -> None:
    data = doc.data
    if data["name"] != doc.path.stem:
        raise doc.error(("name",), f"site name '{data['name']}' differs from the file name",
                        hint=f"rename the file to {data['name']}.yaml or set name: {doc.path.stem}")
    partitions = data.get("partitions", {})
    if data["scheduler"] != "dlws":
        if not partitions:
            raise doc.error((), "a slurm site needs 'partitions'", hint="add the site's partitions")
        default = data.get("default_partition")
        if default is None:
            raise doc.error((), "a slurm site needs 'default_partition'", hint=f"one of: {', '.join(partitions)}")
        if default not in partitions:
            raise doc.error(("default_partition",), f"unknown partition '{default}'", hint=suggest(default, partitions))
    elif "platform" not in data:
        raise doc.error((), "a dlws site needs 'platform'", hint="add platform: hostfile, ssh_port_var, network_interface")
    policy = data.get("policy", {})
    if policy.get("comment_choices") and not policy.get("require_comment"):
        raise doc.error(("policy", "comment_choices"), "comment_choices without require_comment: true",
                        hint="add require_comment: true")
    _check_runtimes(doc)
    for key in data.get("facts", {}):
        if not _has_keypath(data, key.split(".")):
            raise doc.error(("facts", key), f"fact names a key path that is not in the profile: {key}",
                            hint="use a dotted path to an existing key, e.g. partitions.NAME or policy.cpus_per_gpu")


def _check_runtimes(doc: yamlfile.Document) -> None:
    for index, runtime in enumerate(doc.data["runtimes"]):
        kind, version = runtime["kind"], runtime.get("version")
        if "enroot" in runtime and kind != "pyxis":
            raise doc.error(("runtimes", index, "enroot"), f"enroot is the version pyxis drives, not {kind}'s",
                            hint="drop enroot: here, or give the runtime's own version as version:")
        for key in ("importer", "squashfuse"):
            if key in runtime and kind != "pyxis":
                raise doc.error(("runtimes", index, key), f"{key} is a Pyxis option, not {kind}'s",
                                hint=f"drop {key}: here")
            if runtime.get(key) and (why := pyxis_lacks(key, version)):
                raise doc.error(("runtimes", index, key), why,
                                hint="give the Pyxis version the nodes run as version: (e.g. version: 0.24.0)")
        if version and runs_sif(kind) and parse_version(version) < OLDEST_SIF_RUNTIME[kind]:
            oldest = ".".join(map(str, OLDEST_SIF_RUNTIME[kind][:2]))
            other = " (Apptainer 1.x is kind: apptainer)" if kind == "singularity" else ""
            raise doc.error(("runtimes", index, "version"), f"{kind} {version} runs no .sif (SIF came with {kind} "
                            f"{oldest})", hint=f"give the {kind} version the nodes run, {oldest} or newer{other}")


def _partition(name: str, raw: dict[str, Any]) -> Partition:
    return Partition(name=name, **raw)


def _build(data: dict[str, Any], path: Path) -> Site:
    policy = dict(data.get("policy", {}))
    for key in ("comment_choices", "forbid_options"):
        if key in policy:
            policy[key] = tuple(policy[key])
    platform = None
    if "platform" in data:
        raw = dict(data["platform"])
        raw["device_types"] = tuple(raw.get("device_types", ()))
        raw["npu_env"] = tuple(raw.get("npu_env", {}).items())
        platform = Platform(**raw)
    return Site(
        name=data["name"],
        description=data["description"],
        scheduler=data["scheduler"],
        shared_image_dir=data.get("shared_image_dir"),
        compute_internet=data["compute_internet"],
        squashfs_compressions=tuple(data.get("squashfs_compressions", ())),
        nccl_busbw=tuple(sorted((int(k), float(v)) for k, v in (data.get("nccl_busbw") or {}).items())),
        login=data.get("login"),
        partitions=tuple(_partition(n, p) for n, p in data.get("partitions", {}).items()),
        retired_partitions=tuple(data.get("retired_partitions", {}).items()),
        default_partition=data.get("default_partition"),
        runtimes=tuple(Runtime(kind=r["kind"], module=r.get("module"), command=r.get("command"),
                               flags=tuple(r.get("flags", ())), version=r.get("version"), enroot=r.get("enroot"),
                               importer=r.get("importer"), squashfuse=r.get("squashfuse", False))
                       for r in data["runtimes"]),
        mpi_plugin=data.get("mpi_plugin"),
        network_interface=data.get("network_interface"),
        modules=tuple(data.get("modules", ())),
        conda=data.get("conda"),
        venv=data.get("venv"),
        rank_table=data.get("rank_table"),
        env=tuple((k, str(v)) for k, v in data.get("env", {}).items()),
        mounts=tuple(data.get("mounts", ())),
        policy=Policy(**policy),
        platform=platform,
        facts=tuple(Fact(key=k, tag=f["tag"], source=f.get("source", ""), note=f.get("note", ""))
                    for k, f in data.get("facts", {}).items()),
        doctor_date=data.get("doctor", {}).get("date"),
        doctor=tuple(data.get("doctor", {}).get("checks", {}).items()),
        path=path,
    )
