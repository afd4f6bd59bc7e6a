"""The image cache on a shared file system: what ``ckit stage`` fills, ``ckit launch`` finds and the Pyxis importer
serves (one layout for all three; see :mod:`.layout`). Modules here import lazily: the importer's cached path must
start fast."""
