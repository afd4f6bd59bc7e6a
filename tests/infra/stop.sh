#!/usr/bin/env bash
# Stop the test components (all, or the names given) by their pid files under the run dir.
# A component a running test session still uses is left up (it stops at that session's end); --force stops it anyway.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv/bin/python
[ -x "$py" ] || py=python3
exec "$py" -m tests.infra.components stop "$@"
