"""The site's rules, checked against a plan before a job is written or submitted (they live next to the plan
they check; the site package only describes the site). Each violation names the rule, the site and the fix."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import PolicyError
from ..site.model import Partition, Site
from .model import LaunchPlan
from .shell import time_minutes

Rule = Callable[[LaunchPlan], Iterator[str]]
PartitionRule = Callable[[LaunchPlan, Partition], Iterator[str]]


def _account(plan: LaunchPlan) -> Iterator[str]:
    if plan.site.policy.require_account and not plan.request.account:
        yield f"{plan.site.name} requires --account (rule policy.require_account): add --account PROJECT_ID"


def _comment(plan: LaunchPlan) -> Iterator[str]:
    pol, comment = plan.site.policy, plan.request.comment
    if not pol.require_comment:
        return
    choices = ", ".join(pol.comment_choices)
    if not comment:
        yield f"{plan.site.name} requires --comment, one of: {choices} (rule policy.require_comment)"
    elif pol.comment_choices and comment not in pol.comment_choices:
        yield (f"{plan.site.name} does not accept --comment {comment}: use one of: {choices} "
               "(rule policy.comment_choices)")


def _forbidden_account(plan: LaunchPlan) -> Iterator[str]:
    if "account" in plan.site.policy.forbid_options and plan.request.account:
        yield f"{plan.site.name} forbids --account (rule policy.forbid_options): drop it"


def _forbidden_memory(plan: LaunchPlan) -> Iterator[str]:
    if "mem" not in plan.site.policy.forbid_options:
        return
    req = plan.request
    for flag, value in (("--mem", req.mem), ("--mem-per-cpu", req.mem_per_cpu), ("--mem-per-gpu", req.mem_per_gpu)):
        if value is not None:
            yield (f"{plan.site.name} forbids {flag} (rule policy.forbid_options): a job's memory follows its CPUs "
                   "there; drop it and ask for more with -c/--cpus-per-task")


def _min_gpus(plan: LaunchPlan) -> Iterator[str]:
    least = plan.site.policy.min_gpus_per_job
    if least and plan.total_gpus < least:
        yield (f"{plan.site.name} requires at least {least} GPU per job (rule policy.min_gpus_per_job): "
               f"use --gpus-per-node {least} or more")


def _cpus_per_gpu(plan: LaunchPlan) -> Iterator[str]:
    per_gpu, cpus = plan.site.policy.cpus_per_gpu, _cpus_per_node(plan)
    if per_gpu and plan.gpus_per_node and cpus > per_gpu * plan.gpus_per_node:
        yield (f"{plan.site.name} gives {per_gpu} CPUs per GPU: {plan.gpus_per_node} GPUs allow at most "
               f"{per_gpu * plan.gpus_per_node} CPUs per node, you asked for {cpus} (rule policy.cpus_per_gpu): "
               f"lower --cpus-per-task or --tasks-per-node, or ask for more GPUs")


def _part_gpus(plan: LaunchPlan, part: Partition) -> Iterator[str]:
    if plan.gpus_per_node > part.gpus_per_node:
        yield (f"{plan.site.name} partition {part.name} has {part.gpus_per_node} GPUs per node, you asked for "
               f"{plan.gpus_per_node} (rule partitions.{part.name}.gpus_per_node): lower --gpus-per-node "
               "or choose another --partition")


def _part_cpus(plan: LaunchPlan, part: Partition) -> Iterator[str]:
    cpus = _cpus_per_node(plan)
    if part.cpus_per_node and cpus > part.cpus_per_node:
        yield (f"{plan.site.name} partition {part.name} has {part.cpus_per_node} CPUs per node, you asked for "
               f"{cpus} (rule partitions.{part.name}.cpus_per_node): lower --cpus-per-task or --tasks-per-node")


def _part_time(plan: LaunchPlan, part: Partition) -> Iterator[str]:
    if part.max_time and plan.time and time_minutes(plan.time) > time_minutes(part.max_time):
        yield (f"{plan.site.name} partition {part.name} allows at most {part.max_time}, you asked for {plan.time} "
               f"(rule partitions.{part.name}.max_time): lower --time or choose a longer partition")


def _part_nodes(plan: LaunchPlan, part: Partition) -> Iterator[str]:
    if part.node_count and plan.nodes > part.node_count:
        yield (f"{plan.site.name} partition {part.name} has {part.node_count} node(s) ({part.nodes}), you asked "
               f"for {plan.nodes} (rule partitions.{part.name}.nodes): lower -N or choose another --partition")


def _part_gpus_per_user(plan: LaunchPlan, part: Partition) -> Iterator[str]:
    if part.max_gpus_per_user and plan.total_gpus > part.max_gpus_per_user:
        yield (f"{plan.site.name} partition {part.name} allows {part.max_gpus_per_user} GPUs per user, you asked "
               f"for {plan.total_gpus} (rule partitions.{part.name}.max_gpus_per_user): use fewer nodes")


PARTITION_RULES: tuple[PartitionRule, ...] = (_part_gpus, _part_cpus, _part_time, _part_nodes, _part_gpus_per_user)


def _partition(plan: LaunchPlan) -> Iterator[str]:
    if plan.partition is not None:
        for rule in PARTITION_RULES:
            yield from rule(plan, plan.partition)


def _internet(plan: LaunchPlan) -> Iterator[str]:
    site, part = plan.site, plan.partition
    internet = part.internet if part is not None and part.internet is not None else site.compute_internet
    if plan.image is not None and plan.image.is_registry and plan.runtime.kind != "none" and not internet:
        yield (f"{site.name} compute nodes have no internet (rule compute_internet): stage the image first "
               f"with `ckit stage {plan.image.value} --site {site.name}` and pass the staged path to --image")


def _cpus_per_node(plan: LaunchPlan) -> int:
    return plan.tasks_per_node * plan.cpus_per_task


# in the order their messages are listed; each rule yields one message per way the plan breaks it
RULES: tuple[Rule, ...] = (_account, _comment, _forbidden_account, _forbidden_memory, _min_gpus, _cpus_per_gpu,
                           _partition, _internet)


def violations(plan: LaunchPlan) -> list[str]:
    """Every broken rule of ``plan.site`` as one message each (empty when the plan is allowed)."""
    return [message for rule in RULES for message in rule(plan)]


def enforce(plan: LaunchPlan) -> tuple[str, ...]:
    """Raise one PolicyError listing every violation; return the warnings of a plan that is allowed."""
    broken = violations(plan)
    if broken:
        raise PolicyError("\n".join(broken) if len(broken) == 1 else
                          f"{len(broken)} rules of site {plan.site.name} are broken:\n  " + "\n  ".join(broken),
                          hint=f"`ckit sites show {plan.site.name}` lists its rules")
    from . import runtimes

    backend = runtimes.REGISTRY.get(plan.runtime.kind, "--runtime")
    warnings = []
    # imports per node, unless the site's Pyxis has an importer (ckit's converts once for the cluster)
    if plan.image is not None and plan.image.is_registry and backend.refs and backend.artifact \
            and not plan.runtime.importer:
        warnings.append(f"every node imports {plan.image.value} from its registry; `ckit stage` it once to "
                        f"{plan.site.shared_image_dir or 'a shared folder'} and pass the path instead")
    if plan.request.keep_container and plan.image is not None and plan.image.is_registry \
            and "@sha256:" not in plan.image.value:
        warnings.append(f"--keep-container with the tag {plan.image.value}: a moved tag is not noticed; "
                        "pin it (REF@sha256:…) or stage the image")
    if plan.site.policy.submit_from:
        warnings.append(f"{plan.site.name} accepts jobs only from {plan.site.policy.submit_from}: submit from there")
    return tuple(warnings)


def submit_from_violation(site: Site, cwd: Path) -> PolicyError | None:
    """The submit_from rule: the folder ``sbatch`` runs in must be under the site's allowed folder."""
    if not site.policy.submit_from:
        return None
    allowed = Path(os.path.expandvars(site.policy.submit_from))
    if Path(cwd) == allowed or allowed in Path(cwd).parents:
        return None
    return PolicyError(f"{site.name} accepts jobs only from {site.policy.submit_from}, not {cwd} "
                       "(rule policy.submit_from)", hint=f"cd {allowed} and submit from there")
