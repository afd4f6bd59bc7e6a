"""Label and annotation keys: the OCI image-spec's and ckit's own, named once.

ckit writes its keys as image labels (build, render), as manifest annotations (push) and as SIF labels, and
reads them back (push of a stack, ``inspect``, the engine's image lookup); every one of those uses these names.
(The labels apptainer adds to a ``.sif``, ``org.label-schema.*`` and the like, follow apptainer and live with
its rootfs files in :mod:`buildkit.image.rootfs.apptainer`.)
"""

from __future__ import annotations

OCI_PREFIX = "org.opencontainers.image."  # the image-spec's pre-defined annotation keys
CREATED = OCI_PREFIX + "created"
TITLE = OCI_PREFIX + "title"
REF_NAME = OCI_PREFIX + "ref.name"
BASE_NAME = OCI_PREFIX + "base.name"
BASE_DIGEST = OCI_PREFIX + "base.digest"

CKIT_PREFIX = "io.ckit."
STACK = CKIT_PREFIX + "stack"  # the stack a recipe image was built from
PARAMETERS = CKIT_PREFIX + "parameters"  # its resolved parameters (canonical JSON)
VERSION = CKIT_PREFIX + "version"  # the ckit that made it
FINGERPRINT = CKIT_PREFIX + "fingerprint"  # the resolved recipe's digest: finds an engine's build of a stack
SOURCE_DIGEST = CKIT_PREFIX + "source.digest"  # the image a .sif/.sqsh was converted from
BUILD_KEY = CKIT_PREFIX + "build.key"  # the engine build cache key
