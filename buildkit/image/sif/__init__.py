"""SIF, the Singularity Image Format: its constants (:mod:`.format`), writing a ``.sif`` around a squashfs
(:mod:`.write`), reading one (:mod:`.read`) and describing one as ``singularity sif list/header`` do
(:mod:`.text`)."""
