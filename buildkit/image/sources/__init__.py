"""Image sources: where a conversion reads an image's config and layers from, one module per SOURCE form
(``docker-daemon:``, ``docker-archive:``, ``oci:``, ``oci-archive:``, ``docker://``; podman's own storage read
in place behind ``docker-daemon:``). Each local form's module declares its reader in ``READERS``, found by name
(:mod:`.named`); every source identifies the image cheaply and materialises its layers only on a store miss
(:mod:`.base`)."""
