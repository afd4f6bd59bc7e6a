"""The folder layout shared by the cluster image cache, ``ckit stage`` and ``ckit launch`` (:mod:`.layout`), and
the lookup ``launch`` does in it (:mod:`.lookup`). Below the registry and image packages: it knows files, not
registries, so ``launch`` can read it without reaching up."""
