#!/usr/bin/env bash
# Start the real test components (all, or the names given) and print where their env file is:
#   bash tests/infra/start.sh [podman busybox debian registry registry-auth registry-tls munge slurm]
#   source "${CKIT_RUN_DIR:-.run}/env.sh"   # DOCKER_HOST, CONTAINERS_*, REGISTRY_AUTH_FILE, SLURM_CONF
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv/bin/python
[ -x "$py" ] || py=python3
exec "$py" -m tests.infra.components start "$@"
