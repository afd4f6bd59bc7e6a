"""What every call of the Python API shares: where user recipes and sites are, how a site is named, and the
callbacks (progress, messages), which are off unless the caller passes them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..progress import SILENT, Reporter

if TYPE_CHECKING:
    from ..site.model import Site

Log = Callable[[str], None]
"""A callback for one human message (what the CLI prints on stderr)."""

Folders = Sequence[str | Path]
"""User folders layered over the built-ins (the CLI's ``--recipes``/``--sites``; also ``CKIT_RECIPES_PATH`` and
``CKIT_SITES_PATH``)."""


def quiet(message: str) -> None:
    """The default message callback: the library says nothing unless asked."""


def folders(values: Folders) -> list[Path]:
    return [Path(v) for v in values]


def reporter(progress: Reporter | None) -> Reporter:
    return progress if progress is not None else SILENT


def site_profile(site: str | Site | None, sites: Folders = ()) -> Site | None:
    """A site by name (from ``sites`` over the built-ins) or as a loaded :class:`~buildkit.site.model.Site`."""
    if site is None or not isinstance(site, str):
        return site
    from ..site.load import load_site

    return load_site(site, folders(sites))


def required_site(site: str | Site, sites: Folders = ()) -> Site:
    profile = site_profile(site, sites)
    assert profile is not None
    return profile
