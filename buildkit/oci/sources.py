"""The SOURCE grammar: where an image comes from, spelled as skopeo and apptainer spell it.

| form | syntax | names |
|---|---|---|
| `docker-daemon` | `docker-daemon:REF` | an image in Docker or podman (``DOCKER_HOST``) |
| `docker-archive` | `docker-archive:PATH[:REF]` | a ``docker save`` / ``podman save`` tar |
| `oci` | `oci:PATH[:TAG]` | an OCI image layout folder |
| `oci-archive` | `oci-archive:PATH[:TAG]` | an OCI image layout in a tar |
| `docker` | `docker://REF` | an image in a registry |

This is the one parser of that grammar: ``convert``, ``push``, ``pull`` and ``build`` all call :func:`parse_spec`,
and the readers (``buildkit.image.sources``, one module per form) and the registry push pick their
implementation by the form's name.
``PATH[:REF]`` is split as skopeo does, at the first colon, except that a PATH that exists as written (colons and
all) is taken whole, so ``docker-archive:x.tar:myapp:1`` is the archive ``x.tar`` and the image ``myapp:1`` in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError


@dataclass(frozen=True)
class SourceForm:
    name: str  # "docker-archive"
    prefix: str  # what the SOURCE starts with: "docker-archive:" or "docker://"
    syntax: str  # "docker-archive:PATH[:REF]"
    summary: str  # one line for help texts
    has_path: bool  # PATH[:REF] (a file or folder) rather than a bare REF


FORMS: dict[str, SourceForm] = {}


def register(form: SourceForm) -> SourceForm:
    FORMS[form.name] = form
    return form


register(SourceForm("docker-daemon", "docker-daemon:", "docker-daemon:REF",
                    "an image in Docker or podman (DOCKER_HOST is honoured)", has_path=False))
register(SourceForm("docker-archive", "docker-archive:", "docker-archive:PATH[:REF]",
                    "a `docker save` / `podman save` tar", has_path=True))
register(SourceForm("oci", "oci:", "oci:PATH[:TAG]", "an OCI image layout folder (e.g. from `skopeo copy`)",
                    has_path=True))
register(SourceForm("oci-archive", "oci-archive:", "oci-archive:PATH[:TAG]",
                    "an OCI image layout in a tar (`podman save --format oci-archive`)", has_path=True))
register(SourceForm("docker", "docker://", "docker://REF", "an image in a registry", has_path=False))


@dataclass(frozen=True)
class SourceSpec:
    """A parsed SOURCE: the form's name, and either PATH (with an optional REF/TAG inside it) or a bare REF."""

    form: str
    text: str  # the SOURCE as the user wrote it
    path: Path | None = None
    ref: str | None = None  # REF/TAG inside the archive or layout; the image name for docker-daemon: and docker://


def syntaxes() -> tuple[str, ...]:
    return tuple(form.syntax for form in FORMS.values())


def form_of(text: str) -> SourceForm | None:
    """The form whose prefix ``text`` starts with, or None (a file path, a stack name, a bare reference)."""
    for form in FORMS.values():
        if text.startswith(form.prefix):
            return form
    return None


def parse_spec(text: str) -> SourceSpec:
    """``text`` as a SOURCE, or a ConfigError (exit 2) naming the accepted forms."""
    form = form_of(text)
    if form is None:
        raise ConfigError(f"unknown image source {text!r}", hint="use one of: " + ", ".join(syntaxes()))
    rest = text[len(form.prefix):]
    if not rest:
        raise ConfigError(f"image source {text!r} names nothing", hint=f"write {form.syntax}")
    if not form.has_path:
        return SourceSpec(form.name, text, ref=rest)
    path, ref = split_path_ref(rest)
    return SourceSpec(form.name, text, path=path, ref=ref)


def split_path_ref(rest: str) -> tuple[Path, str | None]:
    """``PATH[:REF]``: the whole text when it names an existing path, else split at the first colon."""
    if ":" not in rest or Path(rest).exists():
        return Path(rest), None
    path, _, ref = rest.partition(":")
    if not path:
        raise ConfigError(f"{rest!r}: the PATH before ':' is empty", hint="write PATH[:REF]")
    return Path(path), ref or None
