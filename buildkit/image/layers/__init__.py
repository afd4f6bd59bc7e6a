"""Layers: reading a layer blob into a verified tar (decompressing a stream into a spool as it arrives), its
tar headers (the one tar reader, :mod:`.tarscan`; followed while the spool grows, :mod:`.headerscan`), its
members kept column by column (:mod:`.columns`), and the merged index of all layers that the squashfs writer
writes from (:mod:`.flatten`)."""
