"""``ckit doctor``: plan the checks (what the nodes and the command line allow), run each as a small job, then
write what passed back to the profile as verified facts with the date."""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import CkitError, ConfigError
from ..site.model import Site
from . import probe
from .answers import slurm_ask
from .checks import REGISTRY, Check, CheckResult, Context, JobRun


@dataclass(frozen=True)
class DoctorOptions:
    image: str | None = None  # a SOURCE (docker://REF, docker-daemon:REF, oci:DIR …) with sh in it
    registry: str | None = None  # HOST[:PORT]/REPO the nodes reach: the checks of what ckit push sends
    checks: tuple[str, ...] = ()  # only these (default: every check)
    folder: Path | None = None  # where the jobs run and the artifacts go (every node must read it)
    account: str | None = None
    save: bool = True  # write the verified facts back to the profile


@dataclass
class DoctorReport:
    site: str
    date: str
    node: str
    folder: str
    results: list[CheckResult] = field(default_factory=list)
    saved: str | None = None

    @property
    def exit_code(self) -> int:
        return 1 if any(r.status == "failed" for r in self.results) else 0

    def as_json(self) -> dict[str, Any]:
        return {"site": self.site, "date": self.date, "node": self.node, "folder": self.folder,
                "results": [r.as_json() for r in self.results], "saved": self.saved}


def select(names: tuple[str, ...]) -> tuple[Check, ...]:
    """The checks named (an unknown name is refused with the known ones), or all, in their order."""
    for name in names:
        REGISTRY.get(name, "--check")
    return tuple(c for c in REGISTRY.all() if not names or c.name in names)


def default_folder(site: Site) -> Path:
    """The site's shared image folder (every node reads it), else ./ckit-doctor under the current folder."""
    import os

    shared = os.path.expandvars(site.shared_image_dir) if site.shared_image_dir else None
    base = Path(shared) if shared and "$" not in shared else Path.cwd()
    return base / "ckit-doctor"


def run(site: Site, options: DoctorOptions, *, push: Callable[[str, str], str] | None = None,
        on_result: Callable[[CheckResult], None] = lambda r: None) -> DoctorReport:
    """Probe a compute node, run every selected check, then save the passes to the profile."""
    checks = select(options.checks)
    folder = (options.folder or default_folder(site)).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    node = _probe_node(site, options)
    today = datetime.date.today().isoformat()
    report = DoctorReport(site.name, today, node.host, str(folder))
    ctx = Context(site=site, node=node, folder=folder, launch=_launcher(folder, options),
                  script=_scripter(site, folder, options), artifact=_artifacts(site, folder, options),
                  image=options.image, registry=options.registry, push=push)
    for check in checks:
        result = check.missing(ctx) or _run_one(check, ctx)
        report.results.append(result)
        on_result(result)
    if options.save and site.path is not None:
        report.saved = save(site, report)
    return report


def _run_one(check: Check, ctx: Context) -> CheckResult:
    try:
        if check.needs_image and not ctx.image_path:
            ctx.image_path = _image_path(ctx)
        return check.run(ctx)
    except CkitError as err:  # a job ckit refused to write, a conversion that failed: the check failed
        return check.result("failed", str(err))  # the message and its hint


def _probe_node(site: Site, options: DoctorOptions) -> probe.Probe:
    """What a compute node of the default partition has (one task, the probe script)."""
    part = site.partition(None)
    argv = ["srun", "-N", "1", "-n", "1", "-t", "5", "-J", "ckit-doctor-probe",
            *(["-p", part.name] if part else []), *(["-A", options.account] if options.account else []),
            "sh", "-c", probe.script()]
    answer = slurm_ask(timeout=600)(argv)
    found = probe.parse(answer.stdout)
    if not found.complete:
        raise ConfigError(f"the probe job on {site.name} did not run: {answer.stderr.strip()[-300:] or 'no output'}",
                          hint="run ckit doctor on a login node of the site (srun must work there); "
                               "give --account when the site requires one")
    return found


def _launcher(folder: Path, options: DoctorOptions) -> Callable[[Site, Any, str], JobRun]:
    def launch(site: Site, request: Any, check: str) -> JobRun:
        from ..launch import schedulers
        from ..launch.plan import plan_launch

        request = replace(request, output=f"{check}-%j.out", account=options.account or request.account)
        plan = plan_launch(site, request)
        backend = schedulers.REGISTRY.get(site.scheduler, "site scheduler")
        how = schedulers.Execution(submit=True, wait=True, cwd=folder, script=folder / f"{check}.sbatch",
                                   records=folder / "records")
        result = backend.execute(plan, backend.render(plan), how)
        return JobRun(result.exit_code, _read(result.output), result.job_id)

    return launch


def _scripter(site: Site, folder: Path, options: DoctorOptions) -> Callable[[list[str], str], JobRun]:
    """A plain batch job of shell lines (the runtime's own commands, not ckit's script), waited for."""
    def script(lines: list[str], check: str) -> JobRun:
        from ..process import run as run_process

        path = folder / f"{check}.sh"
        path.write_text("#!/bin/sh\n" + "\n".join(lines) + "\n")
        part = site.partition(None)
        argv = ["sbatch", "--parsable", "--wait", "-N", "1", "-n", "1", "-t", "15", "-J", f"ckit-doctor-{check}",
                "-o", str(folder / f"{check}-%j.out"), "-D", str(folder),
                *(["-p", part.name] if part else []), *(["-A", options.account] if options.account else []),
                str(path)]
        done = run_process(argv, step=f"run the {check} check", check=False, timeout=1800)
        job_id = done.stdout.strip().split(";")[0] or None
        output = folder / f"{check}-{job_id}.out"
        return JobRun(done.returncode, _read(str(output)) + done.stderr, job_id)

    return script


def _artifacts(site: Site, folder: Path, options: DoctorOptions) -> Callable[[str, str | None], Path]:
    made: dict[tuple[str, str | None], Path] = {}

    def artifact(target: str, compression: str | None) -> Path:
        if options.image is None:
            raise ConfigError("this check needs --image", hint="give --image SOURCE")
        if (target, compression) not in made:
            from ..image.convert import convert

            out = folder / f"doctor-{compression or 'site'}.{target}"
            made[(target, compression)] = convert(options.image, target, output=out, compress=compression,
                                                  site=site if compression is None else None).path
            made[(target, compression)] = out if out.is_file() else made[(target, compression)]
        return made[(target, compression)]

    return artifact


def _image_path(ctx: Context) -> tuple[str, ...]:
    """The image's PATH entries, read in the .sqsh ckit writes for it (enroot's /etc/environment)."""
    from ..image.inspect import inspect

    report = inspect(ctx.artifact("sqsh", None))
    text = (report.get("files") or {}).get("/etc/environment") or ""
    found = re.search(r"^PATH=(.*)$", text, re.M)
    return tuple(p for p in (found.group(1).strip('"') if found else "").split(":") if p and "$" not in p)


def _read(path: str | None) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text(errors="replace")[-200_000:]
    except OSError:
        return ""


def save(site: Site, report: DoctorReport) -> str | None:
    """The profile with a ``doctor`` record (date, each check's status) and each pass as a verified fact; None
    when the profile's file cannot be written (a built-in, a read-only folder)."""
    import os
    import tempfile

    import yaml

    from ..config.searchpath import builtin_dir
    from ..config.yamlfile import with_top_level
    from ..fs.files import atomic_write
    from ..site.load import load_site_file

    assert site.path is not None
    # a built-in profile is ckit's, not the site's: writable for root on an editable install, never rewritten
    if site.path.resolve().parent == builtin_dir("sites").resolve():
        return None
    if not os.access(site.path, os.W_OK) or not os.access(site.path.parent, os.W_OK):
        return None
    text = site.path.read_text()
    data = yaml.safe_load(text)
    facts = dict(data.get("facts") or {})
    for result in report.results:
        if result.status == "passed" and result.fact:
            old = facts.get(result.fact, {})
            facts[result.fact] = {"tag": "verified", "source": f"ckit doctor {report.date}: {result.name} passed "
                                  f"on {report.node}", **({"note": old["note"]} if old.get("note") else {})}
    blocks = {**({"facts": facts} if facts else {}),
              "doctor": {"date": report.date, "node": report.node, "checks": {r.name: r.status for r in report.results}}}
    data.update(blocks)
    # the blocks doctor owns are written anew; the rest of the profile keeps its author's lines and comments
    new = with_top_level(text, site.path, blocks)
    if yaml.safe_load(new) != data:  # a profile in flow style: the whole document, under its header comment
        lines = text.splitlines()
        head = "".join(line + "\n" for line in lines[:next((i for i, x in enumerate(lines) if not x.startswith("#")),
                                                            len(lines))])
        new = head + yaml.safe_dump(data, sort_keys=False, width=110)

    with tempfile.TemporaryDirectory() as tmp:
        trial = Path(tmp) / site.path.name
        trial.write_text(new)
        load_site_file(trial)
    atomic_write(site.path, new.encode())
    return str(site.path)
