"""What each target adds to the merged index and how it is wrapped: a ``.sqsh`` gets enroot's and charliecloud's
files and is all-root (as ``enroot import`` makes it), a ``.sif`` apptainer's files, its owners kept, and its
squashfs wrapped in a SIF with the deffile and the OCI config."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .model import ImageConfig, RootfsEntry
from .rootfs import apptainer, charliecloud, enroot
from .sif.read import read_sif
from .sif.write import write_apptainer_sif
from .squashfs.writer import Ownership

if TYPE_CHECKING:
    from .plan import ConvertPlan


def additions(plan: ConvertPlan, config: ImageConfig) -> tuple[list[RootfsEntry], Ownership]:
    """The target's files besides the layers, and how its squashfs owns them all."""
    if plan.target == "sqsh":
        entries = [*enroot.entries(config, provenance=plan.provenance), *charliecloud.entries(config)]
        return entries, Ownership(all_root=True, fixperms=True)
    return apptainer.entries(config, deffile=plan.deffile, source_date_epoch=plan.epoch), Ownership()


def wrap_sif(out: Path, squashfs: Path, plan: ConvertPlan, config: ImageConfig) -> None:
    write_apptainer_sif(out, deffile=plan.deffile.encode(), squashfs=squashfs, arch=config.architecture,
                        oci_config=apptainer.oci_config_json(config), source_date_epoch=plan.epoch)


def squashfs_offset(target: str, artifact: Path) -> int | None:
    """Where the squashfs starts in a published artifact (None: a SIF without a root file system)."""
    if target == "sqsh":
        return 0
    partition = read_sif(artifact).primary_partition()
    return None if partition is None else partition.offset
