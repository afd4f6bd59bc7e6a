"""Speed in one place: which mechanisms a conversion uses (:mod:`.tuning`, one frozen object passed down; the
plain way with ``CKIT_PLAIN=1``), and the helpers of two of them: the CPU share of the reading phase
(:mod:`.cpushare`) and returning freed memory between phases (:mod:`.malloc`). The others live where they act:
the header scan and precompression of a streamed layer (:mod:`..reading`), the paused garbage collector
(:mod:`..produce`) and write-behind (:mod:`..squashfs.blocks`). None changes a byte of the output."""
