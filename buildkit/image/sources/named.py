"""The sources by the name of their SOURCE form: each module of this package declares the forms it reads in
``READERS`` (form -> reader), as launch backends declare themselves; a new form is one module here and one
entry in the SOURCE grammar (:mod:`buildkit.oci.sources`). ``docker://`` is read by the registry package's
reader (:func:`buildkit.registry.source.reader`: the client is a layer above), passed to :func:`parse_source`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

from ...config.declared import declared
from ...errors import ConfigError
from ...oci.sources import parse_spec
from .base import Reader, Source


@functools.cache
def readers() -> Mapping[str, Reader]:
    """Every local form's reader, found by importing each module of this package once."""
    found: dict[str, Reader] = {}
    for readers in declared(__package__ or "", Path(__file__).parent, "READERS"):
        for form, reader in readers.items():
            if form in found:
                raise RuntimeError(f"SOURCE form {form!r} is read by two modules")
            found[form] = reader
    return found


def parse_source(text: str, *, registry: Reader | None = None) -> Source:
    """The source named by ``text`` (the one SOURCE grammar, :mod:`buildkit.oci.sources`), or a ConfigError.
    ``registry`` reads ``docker://``."""
    spec = parse_spec(text)
    if spec.form == "docker":
        if registry is None:
            raise ConfigError(f"{text}: this command reads no registry", hint="give a local SOURCE")
        return registry(spec)
    return readers()[spec.form](spec)
