"""The conversion engine: any image to a ``.sif`` or an Enroot ``.sqsh``, without root. Its parts are packages,
layered (``pyproject.toml``): :mod:`.sources` (where an image comes from, one module per SOURCE form) under
:mod:`.layers` (blobs into verified tars, their headers, the merged index) under :mod:`.squashfs`, :mod:`.sif`
and :mod:`.rootfs` (what each runtime expects besides the layers); :mod:`.speed` holds the tuning of the speed
mechanisms. The pipeline is this package's own modules: :mod:`.plan` (check, identify, key), :mod:`.reading`
(the layers, as the tuning allows), :mod:`.targets` (what each target adds and how it is wrapped),
:mod:`.produce` (every target from one read) and :mod:`.convert` (through the store); :mod:`.inspect` describes a result and :mod:`.fit` says whether it runs on a site."""

from ..oci.sources import syntaxes

SOURCE_FORMS = syntaxes()  # the SOURCE grammar lives in buildkit.oci.sources (one parser for every command)
