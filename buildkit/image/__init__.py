"""Images: reading sources, flattening layers, and writing .sif and Enroot .sqsh artifacts."""

SOURCE_FORMS = ("docker-daemon:REF", "docker-archive:PATH[:REF]", "oci:PATH[:TAG]", "docker://REF")
