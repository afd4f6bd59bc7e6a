"""``ckit login``/``logout``, ``ckit push``, ``ckit pull``, ``ckit lock`` and ``ckit stage``: the OCI registry commands."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import ConfigError
from ..image import SOURCE_FORMS
from ..progress import Meter
from ..registry.distribution.auth import ENV_PASSWORD, ENV_USER, Credentials, erase, from_env, store
from ..registry.distribution.reference import api_host, parse, parse_registry
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
    from ..cache.stage import StagePlan, StageResult
    from ..registry.distribution.client import ManifestHead
    from ..registry.distribution.reference import Reference
    from ..registry.push_plan import PushPlan
    from ..site.model import Site

# The HTTP stack (requests) is imported inside the commands, so that `ckit --help` and the other commands
# do not pay for it.

InsecureOpt = Annotated[bool, typer.Option(
    "--insecure", help="Allow plain http and skip TLS verification (implied for 127.0.0.1/localhost over http).")]
CaFileOpt = Annotated[Path | None, typer.Option(
    "--ca-file", metavar="PATH", help="PEM file of a private CA that signed the registry's certificate.")]
RefArg = Annotated[str, typer.Argument(metavar="REF", help="REGISTRY/REPO:TAG (or @sha256:DIGEST).")]


@contextmanager
def _bar(description: str, total: int | None) -> Iterator[Meter]:
    with progress() as reporter, reporter.meter(description, total=total) as meter:
        yield meter


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
    from ..registry.distribution.client import RegistryClient

    host = parse_registry(registry)
    if not username:
        if password_stdin or not sys.stdin.isatty():
            raise ConfigError("ckit login needs -u USER when the password comes from stdin")
        username = typer.prompt("Username", err=True)
    creds = Credentials(username, _read_secret(password_stdin), source="ckit login")
    client = RegistryClient(api_host(host), insecure=insecure, ca_file=ca_file, credentials=creds)
    checked = client.check_login()
    where = store(host, creds)
    info(f"Login to {host} {'succeeded' if checked else 'stored (the registry asks for no authentication)'}; "
         f"credentials saved in {where}")


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
    from ..registry.distribution.client import RegistryClient
    from ..registry.push import PushOptions, execute
    from ..registry.push_plan import plan
    from ..registry.transfer.annotations import parse_pairs

    target = parse(ref)
    parameters = _parameters(sets) if sets else None
    options = PushOptions(stack, parameters, source_digest, parse_pairs(annotation), image_format,
                          recipes_dirs=tuple(SETTINGS.recipes_dirs))
    profile = _for_site(source, site)
    planned = plan(source, target, image_format, options.sets, options.recipes_dirs,
                   profile.sif_layer_type() if profile else None)
    if dry_run:
        _show_plan(planned, as_json)
        return
    client = RegistryClient.for_reference(target, insecure=insecure, ca_file=ca_file)
    with _bar(f"push {Path(source).name}", planned.size) as bar:
        outcome = execute(client, planned, target, options, bar, bar.total)
    for note in outcome.notes:
        warn(note)
    if as_json:
        emit_json(outcome.as_json())
        return
    info(f"pushed {outcome.kind} {outcome.reference} ({outcome.size} bytes, {outcome.uploaded_bytes} bytes "
         f"uploaded, {outcome.media_type})")
    say(outcome.reference)


def _for_site(source: str, site: str | None) -> Site | None:
    """The site profile of ``--site``, once a .sif/.sqsh SOURCE is seen to run there (exit 2 otherwise)."""
    if site is None:
        return None
    from ..cache.stage import check_fits, site_target
    from ..registry.transfer.artifacts import detect_kind
    from ..site.load import load_site

    profile = load_site(site, SETTINGS.sites_dirs)
    path = Path(source)
    if path.is_file():
        check_fits(path, detect_kind(path).name, profile, site_target(profile))
    return profile


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


def _parameters(sets: list[str]) -> dict[str, dict[str, str]]:
    from ..recipe.params import split_set

    result: dict[str, dict[str, str]] = {}
    for item in sets:
        layer, param, value = split_set(item)
        result.setdefault(layer, {})[param] = value
    return result


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
    from ..registry import pull as pulling
    from ..registry.distribution.client import RegistryClient

    if to not in (None, "sif", "sqsh"):
        raise ConfigError(f"--to {to!r}: expected sif or sqsh")
    target = parse(_registry_ref(ref))
    client = RegistryClient.for_reference(target, insecure=insecure, ca_file=ca_file)
    planned = pulling.plan(client, target, to)
    if planned.kind is None:  # the conversion shows its own progress
        with progress() as reporter:
            result = pulling.execute(client, planned, out_dir, insecure=insecure, ca_file=ca_file,
                                     reporter=reporter)
    else:
        with _bar(f"pull {target.repository}", planned.size) as bar:
            result = pulling.execute(client, planned, out_dir, progress=bar, total=bar.total)
    if as_json:
        emit_json(result)
        return
    info(f"pulled {result['reference']} ({result['size']} bytes, {result['kind']} {result['digest']})")
    say(result["path"])


def _registry_ref(text: str) -> str:
    """A pull names a registry image: ``REF`` or, in the SOURCE grammar, ``docker://REF``; other forms are local."""
    from ..oci.sources import form_of, parse_spec

    form = form_of(text)
    if form is None:
        return text
    if form.name != "docker":
        raise ConfigError(f"{text!r} is a local image source; ckit pull reads a registry",
                          hint=f"convert it with `ckit convert {text} --to sif|sqsh`")
    return parse_spec(text).ref or ""


@app.command("logout")
def logout(
    registry: Annotated[str, typer.Argument(metavar="REGISTRY", help="Registry host[:port].")],
) -> None:
    """Forget the credentials `ckit login` (or `docker login`) stored for REGISTRY."""
    host = parse_registry(registry)
    removed = erase(host)
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
    from ..fsutil import atomic_write
    from ..recipe.catalog import Catalog
    from ..registry.distribution.client import RegistryClient
    from ..registry.lock import lock_data, render, resolve_base

    resolved = Catalog.from_dirs(SETTINGS.recipes_dirs).resolve(stack, sets=list(sets or []), ngc=ngc)
    if parse(resolved.base_image).registry == "localhost":  # a local image: no registry to ask for its digest
        knob = f"--set {resolved.base.name}.registry=REGISTRY/NAMESPACE" if any(
            name == "registry" for name, _ in resolved.base.params) else "a base on a registry"
        raise ConfigError(f"stack {stack} builds on {resolved.base_image}, an image of the local engine that no "
                          f"registry serves, so it has no digest to lock",
                          hint=f"push the image to a registry and lock with {knob}")

    def head_of(ref: Reference) -> ManifestHead:
        client = RegistryClient.for_reference(ref, insecure=insecure, ca_file=ca_file)
        return client.head_manifest(ref.repository, ref.reference)

    base_ref, head = resolve_base(resolved.base_image, head_of)
    data = lock_data(stack=resolved.stack, parameters=resolved.parameters, fingerprint=resolved.fingerprint,
                     base_image=resolved.base_image, base_ref=base_ref, head=head, sets=list(sets or []), ngc=ngc)
    atomic_write(output, render(data).encode())
    if as_json:
        emit_json({**data, "path": str(output)})
        return
    info(f"locked {resolved.stack}: {resolved.base_image} -> {head.digest}")
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
    from ..cache import stage as staging
    from ..registry.stage import stage_dir

    if site is None and dest is None:
        raise ConfigError("ckit stage needs --site SITE or --dest DIR")
    profile = None
    if site is not None:
        from ..site.load import load_site

        profile = load_site(site, SETTINGS.sites_dirs)
    folder = stage_dir(profile.shared_image_dir if profile else None, dest, site or "")
    plan = staging.plan_stage(ref, folder, profile, to=to, compress=compress, is_stack=_is_stack(ref))
    if dry_run:
        emit_plan(plan, as_json)
        return
    if profile is not None and profile.compute_internet:
        info(f"note: the compute nodes of {site} reach the internet; staging is optional there")
    result = _stage(plan, profile, sets, ngc, insecure, ca_file)
    if as_json:
        emit_json(result.as_json())
        return
    how = "made" if result.converted else "already staged"
    info(f"staged {result.source} as .{result.target} ({result.size} bytes, {result.digest}; {how})")
    say(str(result.path))


def _stage(plan: StagePlan, profile: Site | None, sets: list[str] | None, ngc: str | None, insecure: bool,
           ca_file: Path | None) -> StageResult:
    from ..cache import stage as staging

    if plan.kind == "file":
        return staging.stage_file(Path(plan.source), plan.folder, profile, plan.target)
    if plan.kind == "stack":
        stack_name, fingerprint, image_id = _stack_build(plan.source, sets, ngc)
        return staging.stage_stack(stack_name, fingerprint, image_id, plan.folder, target=plan.target,
                                   compression=plan.compression, site=profile, log=info)
    return staging.stage_ref(parse(plan.source), plan.folder, target=plan.target, compression=plan.compression,
                             site=profile, insecure=insecure, ca_file=ca_file, log=info, written=plan.source)


def _is_stack(name: str) -> bool:
    from ..recipe.catalog import Catalog

    return "/" not in name and ":" not in name and not Path(name).is_file() and \
        name in Catalog.from_dirs(SETTINGS.recipes_dirs).stack_names()


def _stack_build(name: str, sets: list[str] | None, ngc: str | None) -> tuple[str, str, str]:
    """(stack, fingerprint, engine image id) of the stack's newest build."""
    from ..recipe.catalog import Catalog
    from ..registry.transfer.engine_images import stack_image

    resolved = Catalog.from_dirs(SETTINGS.recipes_dirs).resolve(name, sets=list(sets or []), ngc=ngc)
    image = stack_image(resolved.fingerprint)
    if image is None:
        again = " ".join(["ckit build", name, *(f"--set {s}" for s in sets or [])])
        raise ConfigError(f"stack {name} has no build in the engine (fingerprint {resolved.fingerprint[:12]})",
                          hint=f"run `{again}` first")
    return resolved.stack, resolved.fingerprint, image
