"""OCI registries: what the commands run (:mod:`.push`, :mod:`.pull`, :mod:`.lock`; what a push
sends, :mod:`.push_plan`; a registry as a conversion's image source, :mod:`.source`) over what they move
(:mod:`.transfer`: images, layers, artifacts) over the distribution API client (:mod:`.distribution`)."""
