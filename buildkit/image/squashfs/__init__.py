"""Squashfs: choosing the compression (:mod:`.compression`), the compressors (:mod:`.codec`), and writing an
image from the merged index (:mod:`.writer`: file data in :mod:`.data` over :mod:`.blocks`, copied from earlier
images by :mod:`.copy`, then the tables, :mod:`.tables`); reuse records of where a layer's data lies in an
earlier image (:mod:`.reuse`, :mod:`.record`) and a streamed layer's files compressed ahead (:mod:`.precompress`).
"""
