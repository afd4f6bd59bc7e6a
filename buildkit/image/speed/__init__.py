"""The conversion's speed mechanisms that change no byte of the output: the CPU share of the reading phase
(:mod:`.cpushare`) and returning freed memory between phases (:mod:`.malloc`)."""
