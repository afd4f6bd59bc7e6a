"""JSON schema of a site profile. Every key has a description; unknown keys are errors."""

from __future__ import annotations

from typing import Any

from .compat import VERSION_PATTERN

_NAME = r"^[a-z][a-z0-9_-]*$"
_SLURM_TIME = r"^([0-9]+-)?[0-9]+(:[0-9]{2}){0,2}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _obj(description: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "description": description, "additionalProperties": False,
            "properties": properties, "required": list(required)}


def _str(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _int(description: str, minimum: int = 0) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "description": description}


def _strings(description: str, **item: Any) -> dict[str, Any]:
    return {"type": "array", "description": description, "items": {"type": "string", **item}}


PARTITION = _obj("One Slurm partition.", {
    "gpus_per_node": _int("GPUs (or NPUs) per node; 0 for CPU-only partitions."),
    "gpu_type": _str("GPU model, as in the GRES type or the site's documentation."),
    "cpus_per_node": _int("CPU cores per node.", 1),
    "mem_per_node_mb": _int("Usable memory per node in MB.", 1),
    "max_time": _str("Walltime limit in Slurm's form (D-HH:MM:SS, HH:MM:SS or minutes).", pattern=_SLURM_TIME),
    "max_jobs_per_user": _int("Jobs one user may have queued or running in this partition.", 1),
    "max_gpus_per_user": _int("GPUs one user may hold at once in this partition.", 1),
    "nodes": _str("Node list in Slurm's hostlist form; -N may not exceed the nodes it names."),
    "arch": {"enum": ["x86_64", "aarch64"], "description": "CPU architecture of the nodes."},
    "internet": {"type": "boolean", "description": "Overrides the site's compute_internet for this partition."},
    "note": _str("A remark shown by `ckit sites show`."),
})

RUNTIME = _obj("One container runtime (or none) available on the compute nodes.", {
    "kind": _str("How the program is started, a runtime ckit knows (`ckit backends`): singularity/apptainer "
                 "(a SIF), pyxis (srun --container-image), charliecloud (ch-run of a .sqsh), podman, or none (directly, "
                 "with the site's modules).",
                 pattern=_NAME),
    "module": _str("Environment module loaded before the runtime is used (e.g. singularity/3.11.0)."),
    "command": _str("The runtime's executable when it differs from the kind (e.g. singularity for apptainer)."),
    "flags": _strings("Extra flags passed to the runtime on every call."),
    "version": _str("The oldest version of the runtime a job may run (3.4.2, 3.11, or 3.x for any 3): a .sif is "
                    "written so that this version and newer run and pull it (squashfs compression, ORAS layer "
                    "type). Without it ckit assumes the oldest of the kind.", pattern=VERSION_PATTERN),
    "enroot": _str("pyxis only: the enroot version on the nodes (pyxis runs enroot).", pattern=VERSION_PATTERN),
    "importer": {"enum": ["ckit", "other"],
                 "description": "pyxis only: plugstack.conf names an importer= (Pyxis 0.21 and newer) that makes "
                                "the .sqsh of a registry image instead of enroot import: ckit (ckit-pyxis-importer, "
                                "one conversion per image for the cluster) or another program."},
    "squashfuse": {"type": "boolean",
                   "description": "pyxis only: plugstack.conf sets use_squashfuse=1 (Pyxis 0.22 and newer; for an "
                                  "importer's file 0.24): a step without a container name starts straight from the "
                                  "squashfs (squashfuse and an overlay), nothing unpacked. ckit's jobs then run "
                                  "unnamed unless --keep-container."},
}, ("kind",))

POLICY = _obj("Rules checked before a job is written or submitted.", {
    "require_account": {"type": "boolean", "description": "Jobs must name a project account (--account)."},
    "require_comment": {"type": "boolean", "description": "Jobs must carry --comment (see comment_choices)."},
    "comment_choices": _strings("Allowed --comment values (the application name)."),
    "forbid_options": _strings("sbatch options the site rejects (e.g. mem).", enum=["mem", "exclusive", "account"]),
    "cpus_per_gpu": _int("Most CPU cores a job may use per GPU.", 1),
    "mem_per_gpu_gb": _int("Memory (GB) the site gives per GPU.", 1),
    "min_gpus_per_job": _int("Fewest GPUs every job must request."),
    "submit_from": _str("Folder jobs must be submitted from ($USER is expanded)."),
})

PLATFORM = _obj("A job platform without sbatch (Apulis / DLWorkspace): what it gives every job.", {
    "hostfile": _str("Hostfile written by the platform (horovodrun -hostfile)."),
    "ssh_port_var": _str("Environment variable holding the workers' SSH port.", pattern=_ENV_NAME),
    "network_interface": _str("Network interface between servers."),
    "rank_table": _str("HCCL rank table the platform writes for NPU jobs."),
    "device_types": _strings("Device types offered by the job form."),
    "npu_env": {"type": "object", "description": "Environment an Ascend NPU process needs.",
                "propertyNames": {"pattern": _ENV_NAME}, "additionalProperties": {"type": "string"}},
}, ("hostfile", "ssh_port_var", "network_interface"))

FACT = _obj("Provenance of one profile value.", {
    "tag": {"enum": ["verified", "seed", "uncertain"],
            "description": "verified: read in the cited source; seed: only in a seed guide; uncertain: inferred."},
    "source": _str("Where the fact was read (document, page, commit)."),
    "note": _str("Why the value is uncertain, or what to check on the site."),
}, ("tag",))

DOCTOR = _obj("What the last `ckit doctor` run on the site found (written by it).", {
    "date": _str("The day it ran (YYYY-MM-DD).", pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"),
    "node": _str("The compute node its probe ran on."),
    "checks": {"type": "object", "description": "Each check's status.",
               "additionalProperties": {"enum": ["passed", "failed", "absent", "skipped"]}},
}, ("date", "checks"))

SITE_SCHEMA: dict[str, Any] = _obj("A ckit site profile.", {
    "name": _str("Site name; must equal the file name.", pattern=_NAME),
    "description": _str("One line shown by `ckit sites`."),
    "scheduler": _str("A scheduler ckit knows (`ckit backends`): slurm (sbatch) or dlws (Apulis/DLWorkspace "
                      "web form).", pattern=_NAME),
    "login": _str("Login or submit host, for information."),
    "partitions": {"type": "object", "description": "Partitions by name.", "minProperties": 1,
                   "propertyNames": {"pattern": r"^[A-Za-z0-9_.-]+$"}, "additionalProperties": PARTITION},
    "retired_partitions": {"type": "object", "description": "Partitions older guides name that the site no longer "
                           "has, each with why and what replaces it (said when --partition names one).",
                           "additionalProperties": {"type": "string"}},
    "default_partition": _str("Partition used when --partition is not given."),
    "runtimes": {"type": "array", "description": "Runtimes on the compute nodes; the first is the default.",
                 "minItems": 1, "items": RUNTIME},
    "mpi_plugin": {"enum": ["pmix", "pmi2", "none"], "description": "srun --mpi plugin for MPI/NCCL jobs."},
    "network_interface": _str("Interface between nodes (horovodrun/gloo --network-interface)."),
    "modules": _strings("Environment modules loaded at the start of every job (before --module)."),
    "conda": _str("Conda environment activated in every job unless --conda names another."),
    "venv": _str("Python venv activated in every job unless --venv names another."),
    "rank_table": {"enum": ["v1", "legacy"], "description": "Default MindSpore rank table format (--rank-table)."},
    "env": {"type": "object", "description": "Environment exported in every job (e.g. the NCCL_IB_* set).",
            "propertyNames": {"pattern": _ENV_NAME}, "additionalProperties": {"type": ["string", "integer"]}},
    "mounts": _strings("Default bind mounts SRC:DST ($USER is expanded in the job)."),
    "shared_image_dir": {"type": ["string", "null"], "description": "Folder on the shared filesystem for staged images."},
    "compute_internet": {"type": "boolean", "description": "Whether compute nodes can reach registries."},
    "squashfs_compressions": _strings("Squashfs compressions the nodes' kernel mounts (loop mounts of a .sif or "
                                      ".sqsh); empty means any. A .sif also follows its runtime's version.",
                                      enum=["gzip", "xz", "lzo", "lz4", "zstd", "lzma"]),
    "nccl_busbw": {"type": "object", "description": "all_reduce_perf's bus bandwidth the site measured, in GB/s, by "
                   "node count (\"1\": 233, \"2\": 165): ckit nccl-report --site expects at least 90 % of it.",
                   "propertyNames": {"pattern": "^[1-9][0-9]*$"},
                   "additionalProperties": {"type": "number", "minimum": 1}},
    "policy": POLICY,
    "platform": PLATFORM,
    "doctor": DOCTOR,
    "facts": {"type": "object", "description": "Provenance per key path (e.g. partitions.gp1d, policy.cpus_per_gpu).",
              "additionalProperties": FACT},
}, ("name", "description", "scheduler", "compute_internet", "runtimes"))
