"""``ckit doctor``: prove on the cluster that ckit's jobs run there, each check a small job."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .app import SETTINGS, JsonOpt, app, complete_site, emit_json, info, say

Opt = typer.Option
_MARK = {"passed": "ok", "failed": "FAILED", "absent": "absent", "skipped": "skipped"}


@app.command("doctor")
def doctor(
    site: Annotated[str | None, Opt("--site", autocompletion=complete_site, help=(
        "Site profile to prove (default: CKIT_SITE, else site in the config file)."))] = None,
    image: Annotated[str | None, Opt("--image", metavar="SOURCE", help=(
        "An image with sh (docker://REF, docker-daemon:REF, oci:DIR …): ckit converts it for each runtime the "
        "nodes have; without it the runtime checks are skipped."))] = None,
    registry: Annotated[str | None, Opt("--registry", metavar="HOST[:PORT]/REPO", help=(
        "A registry the nodes reach: the checks of what ckit push sends (pull oras://, enroot import, the "
        "Pyxis importer)."))] = None,
    check: Annotated[list[str] | None, Opt("--check", metavar="NAME", help=(
        "Run only this check (repeatable; --list names them)."))] = None,
    folder: Annotated[Path | None, Opt("--folder", metavar="DIR", help=(
        "Where the jobs run and the artifacts go; every node must read it (default: the site's shared image "
        "folder, else ./ckit-doctor)."))] = None,
    account: Annotated[str | None, Opt("-A", "--account", help="Project account of the checks' jobs.")] = None,
    save: Annotated[bool, Opt("--save/--no-save", help=(
        "Write the passes back to the profile as verified facts with the date (when its file is "
        "writable)."))] = True,
    insecure: Annotated[bool, Opt("--insecure", help="The registry is plain http.")] = False,
    list_checks: Annotated[bool, Opt("--list", help="List the checks and what each needs; run none.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run small jobs that prove ckit's jobs run on SITE: passed, failed, absent (the nodes lack the runtime, GPUs
    or nodes it needs) or skipped (give --image/--registry). Exit 1 when a check failed."""
    from .. import api

    if list_checks:
        found = api.doctor_checks()
        if as_json:
            emit_json(found)
        for item in found if not as_json else ():
            say(f"{item['name']:<28} {item['summary']} (needs {item['needs']})")
        return
    name = site or (SETTINGS.config.site if SETTINGS.config else None)
    if name is None:
        from ..errors import ConfigError

        raise ConfigError("no site: give --site SITE", hint="`ckit sites` lists them; `ckit sites detect` writes one")
    report = api.doctor(name, image=image, registry=registry, checks=tuple(check or ()), folder=folder,
                        account=account, save=save, insecure=insecure, sites=SETTINGS.sites_dirs,
                        on_result=None if as_json else lambda r: info(f"{_MARK[r.status]:>8}  {r.name}: {r.detail}"))
    if as_json:
        emit_json(report.as_json())
    else:
        counts = {s: sum(r.status == s for r in report.results) for s in _MARK}
        say(f"{report.site} on {report.node} ({report.date}): " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        info(f"profile {report.saved} updated" if report.saved else "profile not rewritten (built-in, read-only or "
             "--no-save): copy it to a --sites folder to keep what doctor verified")
    if report.exit_code:
        raise typer.Exit(report.exit_code)
