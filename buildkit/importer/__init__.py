"""The Pyxis importer, ckit's second entry point (``ckit-pyxis-importer get|release``, :mod:`.pyxis`): enroot's
image URIs (:mod:`.uri`) and credentials (:mod:`.netrc`), the importer's configuration (:mod:`.config`) and the
concurrent gets of one image on one node (:mod:`.peers`). What it serves it fetches into the cluster cache through
:mod:`buildkit.orchestration.fetch`, the work it shares with ``ckit stage``; the folder on disk is
:mod:`buildkit.storage.cache`. Modules here import lazily: the importer's cached path must start fast."""
