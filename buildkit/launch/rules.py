"""The site's rules, checked against a plan before a job is written or submitted (they live next to the plan
they check; the site package only describes the site). Each violation names the rule, the site and the fix."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import PolicyError
from ..site.model import Site
from .model import LaunchPlan
from .shell import time_minutes


def violations(plan: LaunchPlan) -> list[str]:
    """Every broken rule of ``plan.site`` as one message each (empty when the plan is allowed)."""
    site, req, part, pol = plan.site, plan.request, plan.partition, plan.site.policy
    out: list[str] = []
    if pol.require_account and not req.account:
        out.append(f"{site.name} requires --account (rule policy.require_account): add --account PROJECT_ID")
    if pol.require_comment:
        choices = ", ".join(pol.comment_choices)
        if not req.comment:
            out.append(f"{site.name} requires --comment, one of: {choices} (rule policy.require_comment)")
        elif pol.comment_choices and req.comment not in pol.comment_choices:
            out.append(f"{site.name} does not accept --comment {req.comment}: use one of: {choices} "
                       "(rule policy.comment_choices)")
    if "account" in pol.forbid_options and req.account:
        out.append(f"{site.name} forbids --account (rule policy.forbid_options): drop it")
    for flag, value in (("--mem", req.mem), ("--mem-per-cpu", req.mem_per_cpu), ("--mem-per-gpu", req.mem_per_gpu)):
        if "mem" in pol.forbid_options and value is not None:
            out.append(f"{site.name} forbids {flag} (rule policy.forbid_options): a job's memory follows its CPUs "
                       "there; drop it and ask for more with -c/--cpus-per-task")
    if pol.min_gpus_per_job and plan.total_gpus < pol.min_gpus_per_job:
        out.append(f"{site.name} requires at least {pol.min_gpus_per_job} GPU per job (rule policy.min_gpus_per_job): "
                   f"use --gpus-per-node {pol.min_gpus_per_job} or more")
    cpus_per_node = plan.tasks_per_node * plan.cpus_per_task
    if pol.cpus_per_gpu and plan.gpus_per_node and cpus_per_node > pol.cpus_per_gpu * plan.gpus_per_node:
        allowed = pol.cpus_per_gpu * plan.gpus_per_node
        out.append(f"{site.name} gives {pol.cpus_per_gpu} CPUs per GPU: {plan.gpus_per_node} GPUs allow at most "
                   f"{allowed} CPUs per node, you asked for {cpus_per_node} (rule policy.cpus_per_gpu): "
                   f"lower --cpus-per-task or --tasks-per-node, or ask for more GPUs")
    if part is not None:
        if plan.gpus_per_node > part.gpus_per_node:
            out.append(f"{site.name} partition {part.name} has {part.gpus_per_node} GPUs per node, you asked for "
                       f"{plan.gpus_per_node} (rule partitions.{part.name}.gpus_per_node): lower --gpus-per-node "
                       "or choose another --partition")
        if part.cpus_per_node and cpus_per_node > part.cpus_per_node:
            out.append(f"{site.name} partition {part.name} has {part.cpus_per_node} CPUs per node, you asked for "
                       f"{cpus_per_node} (rule partitions.{part.name}.cpus_per_node): lower --cpus-per-task "
                       "or --tasks-per-node")
        if part.max_time and plan.time and time_minutes(plan.time) > time_minutes(part.max_time):
            out.append(f"{site.name} partition {part.name} allows at most {part.max_time}, you asked for {plan.time} "
                       f"(rule partitions.{part.name}.max_time): lower --time or choose a longer partition")
        if part.node_count and plan.nodes > part.node_count:
            out.append(f"{site.name} partition {part.name} has {part.node_count} node(s) ({part.nodes}), you asked for "
                       f"{plan.nodes} (rule partitions.{part.name}.nodes): lower -N or choose another --partition")
        if part.max_gpus_per_user and plan.total_gpus > part.max_gpus_per_user:
            out.append(f"{site.name} partition {part.name} allows {part.max_gpus_per_user} GPUs per user, you asked "
                       f"for {plan.total_gpus} (rule partitions.{part.name}.max_gpus_per_user): use fewer nodes")
    internet = part.internet if part is not None and part.internet is not None else site.compute_internet
    if plan.image is not None and plan.image.is_registry and plan.runtime.kind != "none" and not internet:
        out.append(f"{site.name} compute nodes have no internet (rule compute_internet): stage the image first "
                   f"with `ckit stage {plan.image.value} --site {site.name}` and pass the staged path to --image")
    return out


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
