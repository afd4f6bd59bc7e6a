"""Images: reading sources, flattening layers, and writing .sif and Enroot .sqsh artifacts."""

from ..oci.sources import syntaxes

SOURCE_FORMS = syntaxes()  # the SOURCE grammar lives in buildkit.oci.sources (one parser for every command)
