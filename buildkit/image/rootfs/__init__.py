"""What each runtime expects inside the root file system besides the image's layers, one module per runtime:
apptainer's ``/.singularity.d`` (:mod:`.apptainer`, with its fixed scripts and the Go templates it renders),
enroot's ``/etc/rc`` and environment (:mod:`.enroot`), charliecloud's (:mod:`.charliecloud`)."""
