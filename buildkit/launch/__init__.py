"""Job scripts for a site: plan (pure), render (pure, deterministic), then write/submit (I/O at the edge)."""
