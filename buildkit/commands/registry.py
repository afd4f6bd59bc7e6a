"""``ckit login``/``logout``, ``ckit push``, ``ckit pull``, ``ckit lock`` and ``ckit stage``: the OCI registry commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..api._cli import ENV_PASSWORD, ENV_USER, SOURCE_FORMS, from_env, parse_registry
from ..errors import ConfigError
from .app import (
    SETTINGS,
    DryRunOpt,
    JsonOpt,
    NgcOpt,
    SetOpt,
    app,
    emit_json,
    emit_plan,
    info,
    progress,
    say,
    warn,
)

if TYPE_CHECKING:  # the machinery is imported when a command runs (start-up time)
    from ..api import PushPlan

# The HTTP stack (requests) is imported inside the commands, so that `ckit --help` and the other commands
# do not pay for it.

InsecureOpt = Annotated[bool, typer.Option(
    "--insecure", help="Allow plain http and skip TLS verification (implied for 127.0.0.1/localhost over http).")]
CaFileOpt = Annotated[Path | None, typer.Option(
    "--ca-file", metavar="PATH", help="PEM file of a private CA that signed the registry's certificate.")]
RefArg = Annotated[str, typer.Argument(metavar="REF", help="REGISTRY/REPO:TAG (or @sha256:DIGEST).")]


def _read_secret(password_stdin: bool) -> str:
    if password_stdin:
        secret = sys.stdin.read().rstrip("\r\n")
    elif sys.stdin.isatty():
        secret = typer.prompt("Password", hide_input=True, err=True)
    else:
        raise ConfigError("no password given and stdin is not a terminal",
                          hint="pipe it in with --password-stdin (never put it on the command line)")
    if not secret:
        raise ConfigError("empty password")
    return secret


@app.command("login")
def login(
    registry: Annotated[str, typer.Argument(metavar="REGISTRY", help="Registry host[:port].")],
    username: Annotated[str | None, typer.Option("-u", "--username", help="User name.")] = None,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
    insecure: InsecureOpt = False,
    ca_file: CaFileOpt = None,
) -> None:
    """Check credentials against REGISTRY and store them the way docker does."""
    from .. import api

    if not username:
        if password_stdin or not sys.stdin.isatty():
            raise ConfigError("ckit login needs -u USER when the password comes from stdin")
        username = typer.prompt("Username", err=True)
    done = api.login(registry, username, _read_secret(password_stdin), insecure=insecure, ca_file=ca_file)
    how = "succeeded" if done.checked else "stored (the registry asks for no authentication)"
    info(f"Login to {done.registry} {how}; credentials saved in {done.stored_in}")


FormatOpt = Annotated[str | None, typer.Option(
    "--format", metavar="docker|oci", help="Manifest type of an image (default: the source's own: docker for "
    "docker-archive:, docker-daemon: and stacks, the layout's for oci:/oci-archive:). .sif/.sqsh are always OCI.")]


@app.command("push")
def push(
    source: Annotated[str, typer.Argument(metavar="SOURCE", help=(
        "A .sif or .sqsh file, a stack (its newest build), or an image: " + ", ".join(
            s for s in SOURCE_FORMS if not s.startswith("docker://")) + "."))],
    ref: RefArg,
    image_format: FormatOpt = None,
    stack: Annotated[str | None, typer.Option("--stack", help="Stack name recorded in the annotations.")] = None,
    sets: SetOpt = None,
    source_digest: Annotated[str | None, typer.Option(
        "--source-digest", metavar="DIGEST", help="Digest of the image the artifact was made from.")] = None,
    annotation: Annotated[list[str] | None, typer.Option(
        "--annotation", metavar="KEY=VALUE", help="Extra manifest annotation (repeatable; OCI manifests).")] = None,
    site: Annotated[str | None, typer.Option("--site", metavar="SITE", help=(
        "A .sif/.sqsh for this site: refused (exit 2) when its runtime cannot run it; a .sif gets the ORAS layer "
        "type its Singularity/Apptainer version pulls (default: the type every version pulls)."))] = None,
    insecure: InsecureOpt = False,
    ca_file: CaFileOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be pushed; contact no registry.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Push an image, a .sif or a .sqsh to an OCI registry through ckit's own client (blobs it already has are
    not sent again; plain image layers are gzip-compressed, the same bytes every time)."""
    from .. import api
    from ..api._cli import parse_pairs

    if dry_run:
        _show_plan(api.plan_push(source, ref, image_format=image_format, sets=sets or [], site=site,
                                 recipes=SETTINGS.recipes_dirs, sites=SETTINGS.sites_dirs), as_json)
        return
    with progress() as reporter:
        outcome = api.push(source, ref, image_format=image_format, stack=stack, sets=sets or [],
                           source_digest=source_digest, annotations=parse_pairs(annotation), site=site,
                           insecure=insecure, ca_file=ca_file, recipes=SETTINGS.recipes_dirs,
                           sites=SETTINGS.sites_dirs, progress=reporter)
    for note in outcome.notes:
        warn(note)
    if as_json:
        emit_json(outcome.as_json())
        return
    info(f"pushed {outcome.kind} {outcome.reference} ({outcome.size} bytes, {outcome.uploaded_bytes} bytes "
         f"uploaded, {outcome.media_type})")
    say(outcome.reference)


def _show_plan(planned: PushPlan, as_json: bool) -> None:
    if as_json:
        emit_json({"dry_run": True, **planned.as_json()})
        return
    lines = [f"would push {planned.kind} {planned.source} to {planned.reference}",
             f"  manifest: {planned.media_type or 'each as the layout has it'}"]
    if planned.engine_image:
        lines.append(f"  engine image: {planned.engine_image} (read out of the engine with a save)")
    lines += [f"  {x['what']}: {x.get('size', '?')} bytes, {x['action']}" for x in planned.layers]
    say("\n".join(lines))


@app.command("pull")
def pull(
    ref: RefArg,
    out_dir: Annotated[Path, typer.Option("-o", "--output", metavar="DIR", help="Folder for the file.")] = Path("."),
    to: Annotated[str | None, typer.Option("--to", metavar="sif|sqsh",
                                           help="Convert a plain image to this format.")] = None,
    insecure: InsecureOpt = False,
    ca_file: CaFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pull a .sif/.sqsh artifact (or, with --to, an image converted); every byte is digest-checked."""
    from .. import api

    with progress() as reporter:
        result = api.pull(ref, output=out_dir, to=to, insecure=insecure, ca_file=ca_file, progress=reporter)
    if as_json:
        emit_json(result.as_json())
        return
    info(f"pulled {result.reference} ({result.size} bytes, {result.kind} {result.digest})")
    say(result.path)


@app.command("logout")
def logout(
    registry: Annotated[str, typer.Argument(metavar="REGISTRY", help="Registry host[:port].")],
) -> None:
    """Forget the credentials `ckit login` (or `docker login`) stored for REGISTRY."""
    from .. import api

    host = parse_registry(registry)
    removed = api.logout(registry)
    if removed:
        info(f"Removed login credentials for {host} from {', '.join(removed)}")
    else:
        info(f"Not logged in to {host}")
    if from_env(host) is not None:
        warn(f"{ENV_USER}/{ENV_PASSWORD} are set in the environment and still log in to {host}")


@app.command("lock")
def lock(
    stack: Annotated[str, typer.Argument(metavar="STACK", help="Stack name (see `ckit recipes`).")],
    sets: SetOpt = None,
    ngc: NgcOpt = None,
    output: Annotated[Path, typer.Option("-o", "--output", metavar="FILE", help="Lock file.")] = Path("ckit.lock"),
    insecure: InsecureOpt = False,
    ca_file: CaFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pin the stack's base image tag to its registry digest in ckit.lock."""
    from .. import api

    data = api.lock(stack, sets=sets or [], ngc=ngc, output=output, insecure=insecure, ca_file=ca_file,
                    recipes=SETTINGS.recipes_dirs)
    if as_json:
        emit_json(data)
        return
    info(f"locked {data['stack']}: {data['base']['image']} -> {data['base']['digest']}")
    say(str(output))


@app.command("stage")
def stage(
    ref: Annotated[str, typer.Argument(metavar="SOURCE", help=(
        "A registry image or .sif/.sqsh artifact (REGISTRY/REPO:TAG or @sha256:DIGEST), a stack (its newest "
        "build), or a local .sif/.sqsh file."))],
    site: Annotated[str | None, typer.Option("--site", metavar="SITE", help=(
        "Site profile (see `ckit sites`): its shared image folder, the format its runtime runs and a compression "
        "it mounts."))] = None,
    dest: Annotated[Path | None, typer.Option("--dest", metavar="DIR",
                                              help="Folder to stage into (default: the site's shared image folder).")] = None,
    to: Annotated[str | None, typer.Option("--to", metavar="sif|sqsh",
                                           help="Format to stage (default: what the site's runtime runs).")] = None,
    compress: Annotated[str | None, typer.Option("--compress", metavar="ALGO[:LEVEL]", help=(
        "Squashfs compression of a converted image (default: ckit's default the site mounts)."))] = None,
    sets: SetOpt = None,
    ngc: NgcOpt = None,
    insecure: InsecureOpt = False,
    ca_file: CaFileOpt = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Put an image where the site's compute nodes find it (`ckit launch --image` and the Pyxis importer do)."""
    from .. import api

    plan = api.plan_stage(ref, site=site, dest=dest, to=to, compress=compress, recipes=SETTINGS.recipes_dirs,
                          sites=SETTINGS.sites_dirs)
    if dry_run:
        emit_plan(plan, as_json)
        return
    if site is not None and api.site(site, sites=SETTINGS.sites_dirs).compute_internet:
        info(f"note: the compute nodes of {site} reach the internet; staging is optional there")
    result = api.stage(ref, site=site, dest=dest, to=to, compress=compress, sets=sets or [], ngc=ngc,
                       insecure=insecure, ca_file=ca_file, recipes=SETTINGS.recipes_dirs,
                       sites=SETTINGS.sites_dirs, on_log=info)
    if as_json:
        emit_json(result.as_json())
        return
    how = "made" if result.converted else "already staged"
    info(f"staged {result.source} as .{result.target} ({result.size} bytes, {result.digest}; {how})")
    say(str(result.path))
