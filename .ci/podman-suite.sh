#!/usr/bin/env bash
# The engine contract suite against rootless Podman, the way shared machines run it: as a normal
# user with /etc/subuid entries. Run as root (it creates that user); CI runs it after `make test`.
# Podman as root is not what kernellab supports, and on our CI machines it cannot start containers.
set -euo pipefail
cd "$(dirname "$0")/.."
user=${KERNELLAB_PODMAN_USER:-kernellab-ci}
[ "$(id -u)" = 0 ] || { echo "run as root: it creates the user $user and copies the checkout for it" >&2; exit 1; }
need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v newuidmap >/dev/null 2>&1 || need+=(uidmap)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /usr/libexec/podman/catatonit ] || need+=(catatonit)
/usr/bin/python3 -m venv --help >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
id "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
grep -q "^$user:" /etc/subuid || usermod --add-subuids 300000-365535 --add-subgids 300000-365535 "$user"
home=$(getent passwd "$user" | cut -d: -f6)
# Site settings, not kernellab's: crun cannot start containers on hosts with hybrid cgroups (ours),
# runc can; without fuse-overlayfs Podman 4.3 falls back to vfs (a full copy per layer) although
# the kernel's own overlay works rootless.
mkdir -p "$home/.config/containers"
[ -d /sys/fs/cgroup/unified ] && printf '[engine]\nruntime = "runc"\n' > "$home/.config/containers/containers.conf"
printf '[storage]\ndriver = "overlay"\n' > "$home/.config/containers/storage.conf"
chown -R "$user:" "$home/.config"
if runuser -u "$user" -- env HOME="$home" bash -c 'cd ~ && podman info --format "{{.Store.GraphDriverName}}"' 2>&1 \
   | grep -q "vfs"; then
  runuser -u "$user" -- env HOME="$home" bash -c 'cd ~ && podman system reset -f' >/dev/null 2>&1 || true
fi
# The user's own copy of the checkout (tracked and new files), and the root-made debootstrap base.
work="$home/kernellab"
rm -rf "$work" && mkdir -p "$work"
git ls-files -co --exclude-standard -z | tar --null -T - -c --ignore-failed-read 2>/dev/null | tar -C "$work" -x
docker image inspect kernellab-base:debian-bookworm >/dev/null 2>&1 || .venv/bin/invoke base-image
docker save kernellab-base:debian-bookworm -o "$home/base.tar"
chown -R "$user:" "$home"
# The user cannot read root's Python; Debian's python3 makes its venv.
runuser -u "$user" -- env HOME="$home" USER="$user" XDG_RUNTIME_DIR= bash -c "
  set -euo pipefail
  cd '$work'
  podman image prune -f >/dev/null  # earlier runs' dangling builds
  /usr/bin/python3 -m venv .venv
  .venv/bin/pip install -q -e .
  KERNELLAB_REQUIRE_PODMAN=1 KERNELLAB_ENGINE=podman KERNELLAB_BASE_ARCHIVE='$home/base.tar' \
    .venv/bin/python -m pytest -p no:cacheprovider -m podman tests/test_engine_contract.py -v
"
