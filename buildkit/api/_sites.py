"""Site profiles from Python (``ckit sites``, ``ckit sites show``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._common import Folders, folders, required_site

if TYPE_CHECKING:
    from ..site.model import Site


def site(name: str, *, sites: Folders = ()) -> Site:
    """The site profile ``name``: scheduler, partitions, limits, runtimes, rules (``ckit sites show``).

    :param sites: user site folders over the built-ins (``--sites``; also ``CKIT_SITES_PATH``).
    :raises ConfigError: no such site, or its file is not a valid profile (file, line and key named).
    """
    return required_site(name, sites)


def sites(*, sites: Folders = ()) -> list[Site]:
    """Every site profile (``ckit sites``)."""
    from ..site.load import list_sites

    return list_sites(folders(sites))
