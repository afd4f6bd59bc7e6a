#!/usr/bin/env bash
# System packages for ckit's tests, CI and `make demo` on Debian 12 (run as root).
# Idempotent and fast when everything is present: one dpkg-query, and `apt-get update` only when something is
# missing. /usr/sbin/policy-rc.d (exit 101) is put in place first, so apt starts no daemon (munge, slurm,
# docker-registry): tests/infra starts its own, on 127.0.0.1, with configs under the run dir.
# Nothing here is built from source: every program comes from Debian's packages. Apptainer, which Debian 12 does not
# carry, runs from a root of Debian's unstable packages that tests/infra/apptainer.py builds with mmdebstrap.
set -euo pipefail

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
  # the docs site: graphviz draws its diagrams at build; Chromium and its driver check the built site (headless)
  graphviz chromium chromium-driver
  # script lint, base images
  shellcheck mmdebstrap busybox-static
  # Debian's own Python with venv for the Makefile (a python3 on PATH may be a broken shim), CA bundle for the mirror
  python3 python3-venv python3-dev ca-certificates
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

todo=$(missing)
[ -n "$todo" ] || exit 0

echo "install.sh: installing $(echo "$todo" | tr '\n' ' ')" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q || die "apt-get update failed"
# shellcheck disable=SC2086  # one word per package
apt-get install -y -q --no-install-recommends $todo || die "apt-get install failed for: $(echo "$todo" | tr '\n' ' ')"

left=$(missing)
[ -z "$left" ] || die "still not installed: $(echo "$left" | tr '\n' ' ')"
for tool in podman runc docker-registry htpasswd slurmctld slurmd munged sbatch mmdebstrap siftool tar2sqfs \
            mksquashfs unsquashfs shellcheck skopeo umoci openssl setpriv torchrun mpirun nsenter unshare ch-run \
            runuser useradd; do
  command -v "$tool" >/dev/null || die "$tool not on PATH after install"
done
[ -x /bin/busybox ] || die "/bin/busybox missing after installing busybox-static"
echo "install.sh: done" >&2
