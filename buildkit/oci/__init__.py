"""OCI vocabulary shared by the image readers and the registry client: digests and image layouts.

This package sits at the bottom of the house (it imports only :mod:`buildkit.errors`), so that both
``image`` and ``registry`` verify content the same way: one digest grammar, one verifying reader, one
opener for the blobs of a layout.
"""
