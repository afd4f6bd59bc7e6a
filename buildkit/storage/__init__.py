"""Where converted images live, and who may write them.

* :mod:`.safefs`: file operations in folders other users can reach (nothing planted followed, nothing read
  unbounded, nothing created that others may write);
* :mod:`.lease`: one holder of a name at a time, across processes and hosts, on any POSIX file system;
* :mod:`.store`: one user's store (the personal one, or that user's tree in a shared cache), with its reuse records
  (:mod:`.reuse_files`);
* :mod:`.trust`: a shared cache folder's trust model: every user writes only their own tree, readers serve only the
  trees they trust;
* :mod:`.cache`: a shared cache folder over its trees (refs, holds, use stamps, access, eviction), :mod:`.holds`
  the two writes of a reader, :mod:`.cleanup` what dead work left, :mod:`.lookup` what ``ckit launch`` finds there.

Modules here import lazily: the Pyxis importer's cached path loads only :mod:`.safefs` and :mod:`.holds`.
"""
