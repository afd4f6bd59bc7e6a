"""What each target adds to the merged index and how it is wrapped: a ``.sqsh`` gets enroot's and charliecloud's
files and is all-root (as ``enroot import`` makes it), a ``.sif`` apptainer's files, its owners kept, and its
squashfs wrapped in a SIF with the deffile and the OCI config."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .model import ImageConfig, RootfsEntry
from .rootfs import apptainer, charliecloud, enroot
from .sif.read import read_sif
from .sif.write import apptainer_partition_offset, finish_apptainer_sif
from .squashfs.writer import Ownership

if TYPE_CHECKING:
    from .plan import ConvertPlan


def additions(plan: ConvertPlan, config: ImageConfig) -> tuple[list[RootfsEntry], Ownership]:
    """The target's files besides the layers, and how its squashfs owns them all."""
    if plan.target == "sqsh":
        entries = [*enroot.entries(config, provenance=plan.provenance), *charliecloud.entries(config)]
        return entries, Ownership(all_root=True, fixperms=True)
    return apptainer.entries(config, deffile=plan.deffile, source_date_epoch=plan.epoch), Ownership()


def squashfs_start(plan: ConvertPlan, config: ImageConfig) -> int:
    """Where the target's squashfs is written in its file: a SIF's partition is written in place, never copied
    into the SIF afterwards (a copy of the whole image, on every conversion)."""
    if plan.target == "sqsh":
        return 0
    return apptainer_partition_offset(deffile=plan.deffile.encode(), oci_config=apptainer.oci_config_json(config))


def wrap(out: Path, plan: ConvertPlan, config: ImageConfig, start: int) -> None:
    """What goes around the squashfs written at ``start`` of ``out``: a SIF's header and small objects."""
    if plan.target == "sif":
        finish_apptainer_sif(out, deffile=plan.deffile.encode(), oci_config=apptainer.oci_config_json(config),
                             arch=config.architecture, squashfs_size=out.stat().st_size - start,
                             source_date_epoch=plan.epoch)


def squashfs_offset(target: str, artifact: Path) -> int | None:
    """Where the squashfs starts in a published artifact (None: a SIF without a root file system)."""
    if target == "sqsh":
        return 0
    partition = read_sif(artifact).primary_partition()
    return None if partition is None else partition.offset
