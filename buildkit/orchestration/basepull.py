"""A build that failed because the engine could not fetch the base image: the hint says how to build anyway.

Offline, behind a firewall or behind a TLS-inspecting proxy, the first thing a build does (``FROM``) fails with
the engine's words (``dial tcp … no such host``, ``x509: certificate signed by unknown authority``). The hint
then names the base's ``registry`` parameter ready to paste with the line's own ``--set``/``--ngc`` (a mirror, or
a local image as ``make demo`` builds on), the engine's own way for a base without one (pull it from a mirror and
tag it with the name the recipe uses), and for a certificate the engine does not trust, where its CA goes.
One place for both engines: :func:`explain` runs on every failed build (:func:`buildkit.orchestration.build.execute`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..engine.base import BuildFailed
from ..errors import BuildError, CkitError

DOCS = "docs/building.md#offline-or-behind-a-proxy"

# What docker, podman/buildah and apptainer say when the base cannot be fetched (lower case).
PULL_FAILURES = ("pull access denied", "manifest unknown", "dial tcp", "no such host", "connection refused",
                 "tls handshake timeout", "x509:", "i/o timeout", "toomanyrequests", "pinging container registry",
                 "initializing source docker://", "network is unreachable", "unable to get image",
                 "requested access to the resource is denied", "name unknown", "not found: manifest unknown",
                 "failed to resolve", "connection reset by peer", "timeout exceeded while awaiting headers")
UNTRUSTED = ("x509:", "certificate signed by unknown authority", "certificate verify failed")
RATE_LIMITED = ("toomanyrequests",)


@dataclass(frozen=True)
class BaseSource:
    """Where a plan's base comes from, and the line that built it: what the hint repeats and changes."""

    stack: str
    image: str  # the FROM reference (a locked build: the pinned digest)
    layer: str  # the base layer's name (debian)
    registry: str | None  # its ``registry`` parameter's value, None when it has none (the NGC bases)
    sets: tuple[str, ...] = ()
    ngc: str | None = None
    locked: bool = False
    options: tuple[str, ...] = ()  # the line's other options (--tag, --to, -o…), which every proposed line repeats


def host_and_name(image: str) -> tuple[str, str]:
    """The registry host of a reference as docker reads it (``debian:bookworm`` → ``docker.io``), and the last
    part of its repository (``debian``)."""
    from ..registry.distribution.reference import parse

    try:
        ref = parse(image)
    except CkitError:  # not a reference ckit reads: the whole text stands for both
        return image, image
    return ref.registry, ref.repository.rsplit("/", 1)[-1]


def is_base_pull(err: BuildError, source: BaseSource) -> bool:
    """Whether ``err`` is the engine failing to fetch the base: at the ``FROM`` step (docker, podman), or, from
    a failure that names no step (a refused build, apptainer's bootstrap), the words of a failed pull next to the
    base's registry or name."""
    step = getattr(err, "step", None) or ""
    if step:  # docker and podman name the step: the base is fetched at FROM, and only there
        return "(FROM " in step
    tail = "\n".join([err.message, *getattr(err, "log", "").splitlines()[-10:]]).lower()
    names = {name.lower() for name in host_and_name(source.image)}
    return any(word in tail for word in PULL_FAILURES) and any(name in tail for name in names)


def _line(source: BaseSource, *extra: str) -> str:
    """``ckit build STACK`` with the line's --ngc and --set (those of the registry replaced by ``extra``)."""
    mine = f"{source.layer}.registry="
    sets = [s for s in source.sets if not (extra and s.startswith(mine))]
    words = ["ckit", "build", source.stack, *(["--ngc", source.ngc] if source.ngc else []),
             *(w for s in [*sets, *extra] for w in ("--set", s)), *source.options]
    return shlex.join(words)


def hint(source: BaseSource, cause: str) -> str:
    """What to do instead, in commands that work when pasted (MIRROR: the host of your mirror)."""
    said = cause.lower()
    host = host_and_name(source.image)[0]
    mirror = "MIRROR" + (f"/{source.registry.partition('/')[2]}" if source.registry and "/" in source.registry
                         else "")
    if source.locked:
        relock = (f"`ckit lock {source.stack} --set {source.layer}.registry={mirror}`" if source.registry is not None
                  else f"a bases/{source.layer}.yaml of your own naming the mirror (--recipes DIR)")
        lines = [f"a locked build fetches the digest it pinned from {host}: lock against a mirror with {relock}, "
                 f"then `{shlex.join(['ckit', 'build', source.stack, '--locked', *source.options])}`"]
    elif source.registry is not None and source.image.startswith(source.registry + "/"):
        local = "localhost" + source.image[len(source.registry):]
        lines = [f"build from a mirror of {host}: `{_line(source, f'{source.layer}.registry={mirror}')}`, or from "
                 f"an image the engine has as {local}: `{_line(source, f'{source.layer}.registry=localhost')}`"]
    else:
        first = source.image.split("/", 1)
        repo = first[1] if len(first) == 2 and first[0] == host else source.image
        lines = [f"give the engine the base under the name the recipe uses: `docker pull MIRROR/{repo} && "
                 f"docker tag MIRROR/{repo} {source.image}` (podman too), then `{_line(source)}` again"]
    if any(word in said for word in UNTRUSTED):
        lines.append(f"the engine does not trust the certificate {host} (or a proxy between) showed: put that CA "
                     f"in /etc/docker/certs.d/{host}/ca.crt (podman: /etc/containers/certs.d/{host}/ca.crt), or in "
                     "the engine host's trust store (Debian: /usr/local/share/ca-certificates/NAME.crt, "
                     "update-ca-certificates, then restart the engine)")
    if any(word in said for word in RATE_LIMITED):
        lines.append(f"{host} limits anonymous pulls: `docker login {host}`, or a mirror as above")
    lines.append(f"more in {DOCS}")
    return "\n  ".join(lines)


# What pip says when a proxy re-signs TLS (lower case): its retries end in one of these
PIP_TLS = ("certificate_verify_failed", "certificate verify failed", "sslerror", "ssl: ")


def pip_tls(err: BuildError, source: BaseSource) -> BuildError:
    """A pip step that failed on TLS, with the two settings that fix it (the line's options repeated)."""
    tail = "\n".join([err.message, *getattr(err, "log", "").splitlines()[-40:]]).lower()
    if not isinstance(err, BuildFailed) or "pip" not in tail or not any(word in tail for word in PIP_TLS):
        return err
    line = ["ckit", "build", source.stack, *(["--ngc", source.ngc] if source.ngc else []),
            *(w for s in source.sets for w in ("--set", s))]
    lines = [f"pip could not verify its index's TLS certificate (a proxy that re-signs TLS?): give pip that CA, "
             f"`{shlex.join([*line, '--set', 'pip.cert=CA.pem', *source.options])}`, or a mirror, "
             f"`{shlex.join([*line, '--set', 'pip.index_url=https://MIRROR/simple', *source.options])}`",
             f"more in {DOCS}"]
    return BuildFailed(err.cause, step=err.step, log=err.log.splitlines(), hint="\n  ".join(lines))


def explain(err: BuildError, source: BaseSource) -> BuildError:
    """``err`` with the hint for a base the engine could not fetch, or for pip behind a TLS proxy; any other
    failure as it is."""
    if not is_base_pull(err, source):
        return pip_tls(err, source)
    cause = err.cause if isinstance(err, BuildFailed) else err.message
    text = f"the engine could not fetch the base image: {cause}"
    if isinstance(err, BuildFailed):
        return BuildFailed(text, step=err.step, log=err.log.splitlines(), hint=hint(source, cause))
    return BuildError(text, hint=hint(source, cause))
