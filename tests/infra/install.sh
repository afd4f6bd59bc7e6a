#!/usr/bin/env bash
# System packages for ckit's tests, CI and `make demo` on Debian 12 (run as root).
# Idempotent and fast when everything is present: one dpkg-query, and `apt-get update` only when something is
# missing. /usr/sbin/policy-rc.d (exit 101) is put in place first, so apt starts no daemon (munge, slurm,
# docker-registry): tests/infra starts its own, on 127.0.0.1, with configs under the run dir.
# Then the HPC container runtimes the tests run for real (enroot 4.1.2, Pyxis 0.24.0, SingularityCE 3.4.2, under
# /opt/ckit-runtimes): installed by ../shared/runtimes/install.sh next to this repository when it is there (it is
# idempotent, too); without it and without them, this script says where they come from and fails.
set -euo pipefail

RUNTIMES_PREFIX=/opt/ckit-runtimes
RUNTIMES_SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/shared/runtimes/install.sh"
RUNTIMES=(enroot-4.1.2/bin/enroot pyxis-0.24.0/spank_pyxis.so singularity-3.4.2/bin/singularity)

PACKAGES=(
  # containers: podman API service + build engines (runc: crun fails on this host's hybrid cgroups)
  podman runc conmon uidmap slirp4netns containernetworking-plugins iptables catatonit buildah
  # image tools and squashfs / SIF; xfsprogs: the bench's reflink file system (a loop-mounted XFS image)
  skopeo umoci squashfs-tools squashfs-tools-ng squashfuse fuse3 siftool xfsprogs
  # registry (distribution) + htpasswd
  docker-registry apache2-utils openssl
  # slurm single node + SPANK build
  slurm-wlm slurmctld slurmd slurm-client munge libslurm-dev gcc libc6-dev
  # real frameworks for launch's jobs: Debian's CPU PyTorch, Open MPI + mpi4py (Slurm's mpi/pmix dlopens
  # libpmix.so from libpmix-dev), venvs for tensorflow-cpu and ray, and Lmod for --module
  python3-torch python3-numpy python3-mpi4py openmpi-bin libpmix-dev lmod
  # Horovod's sdist builds against Debian's torch with its headers (libtorch-dev, pybind11-dev)
  libtorch-dev pybind11-dev cmake g++
  # Charliecloud's ch-run (0.31, SquashFUSE built in): --runtime charliecloud jobs run ckit's .sqsh unprivileged
  charliecloud-runtime
  # script lint, base images
  shellcheck mmdebstrap busybox-static
  # python venv for the Makefile, CA bundle for the mirror
  python3-venv ca-certificates
)

die() { echo "install.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (apt-get install)"

if [ ! -x /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# ckit tests: apt must not start daemons; tests/infra starts its own\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 0755 /usr/sbin/policy-rc.d
fi

missing() {  # every package not in state "installed" (unknown names included)
  comm -23 <(printf '%s\n' "${PACKAGES[@]}" | sort -u) \
           <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null \
               | awk '$2 == "installed" {print $1}' | sort -u)
}

runtimes() {  # the runtimes from ../shared/runtimes (--optional: squashfuse, fuse-overlayfs for Pyxis/enroot)
  if [ -f "$RUNTIMES_SCRIPT" ]; then
    bash "$RUNTIMES_SCRIPT" --optional >/dev/null || die "$RUNTIMES_SCRIPT --optional failed"
  fi
  local rel
  for rel in "${RUNTIMES[@]}"; do
    [ -e "$RUNTIMES_PREFIX/$rel" ] && continue
    die "$RUNTIMES_PREFIX/$rel is missing, and there is no $RUNTIMES_SCRIPT to install it.
  The tests run the real runtimes, built for $RUNTIMES_PREFIX (their prefix is compiled in):
    enroot v4.1.2 (github.com/NVIDIA/enroot), Pyxis v0.24.0 (github.com/NVIDIA/pyxis, against libslurm-dev 22.05),
    SingularityCE v3.4.2 (github.com/sylabs/singularity).
  Put the shared runtimes folder (its install.sh and bundles) at $(dirname "$RUNTIMES_SCRIPT") and run this again,
  or build and install those tags under $RUNTIMES_PREFIX/NAME-VERSION."
  done
}

todo=$(missing)
if [ -z "$todo" ]; then
  runtimes
  exit 0
fi

echo "install.sh: installing $(echo "$todo" | tr '\n' ' ')" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q || die "apt-get update failed"
# shellcheck disable=SC2086  # one word per package
apt-get install -y -q --no-install-recommends $todo || die "apt-get install failed for: $(echo "$todo" | tr '\n' ' ')"

left=$(missing)
[ -z "$left" ] || die "still not installed: $(echo "$left" | tr '\n' ' ')"
runtimes
for tool in podman runc docker-registry htpasswd slurmctld slurmd munged sbatch mmdebstrap siftool tar2sqfs \
            mksquashfs unsquashfs shellcheck skopeo umoci openssl setpriv torchrun mpirun nsenter unshare ch-run \
            runuser useradd; do
  command -v "$tool" >/dev/null || die "$tool not on PATH after install"
done
[ -x /bin/busybox ] || die "/bin/busybox missing after installing busybox-static"
echo "install.sh: done" >&2
