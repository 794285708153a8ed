#!/usr/bin/env bash
# Make sure a Docker engine with BuildKit is running, and the tools kernellab's builds use are here.
# Idempotent. On a machine without Docker it installs Debian/Ubuntu's docker.io (needs root) and
# starts dockerd in the background; where Docker already runs it only checks.
set -euo pipefail
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
[ -x /usr/bin/docker ] || command -v docker >/dev/null 2>&1 || need+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v zstd >/dev/null 2>&1 || need+=(zstd)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "kernellab: need ${need[*]}; run \`sudo make engine\` once (or install them yourself)." >&2
    exit 1
  fi
  echo "installing ${need[*]} from the OS archive"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Docker 23+ clients build with BuildKit only through the buildx plugin; Debian/Ubuntu package it.
if [ "$(id -u)" = 0 ] && ! docker buildx version >/dev/null 2>&1 \
   && ! /usr/bin/docker version --format '{{.Client.Version}}' 2>/dev/null | grep -qE '^(1[0-9]|2[0-2])\.' \
   && apt-cache show docker-buildx >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-buildx >/dev/null
fi
# Under sudo, let the invoking user reach the engine without sudo next time.
if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ] && getent group docker >/dev/null \
   && ! id -nG "$SUDO_USER" | grep -qw docker; then
  usermod -aG docker "$SUDO_USER" && echo "added $SUDO_USER to the docker group (log in again to use it)"
fi
if docker info >/dev/null 2>&1; then
  echo "docker engine $(docker version --format '{{.Server.Version}}') is running"
  exit 0
fi
if docker info 2>&1 | grep -qi "permission denied"; then
  echo "kernellab: the Docker engine runs but $(id -un) may not use it; \`sudo usermod -aG docker $(id -un)\` and log in again." >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "kernellab: no Docker engine is running; start it (\`sudo systemctl start docker\`, or \`sudo make engine\`)." >&2
  exit 1
fi
if command -v systemctl >/dev/null 2>&1 && systemctl start docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  echo "started docker with systemd"
  exit 0
fi
log=/var/log/kernellab-dockerd.log
(setsid dockerd >"$log" 2>&1 &)
for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
if ! docker info >/dev/null 2>&1; then
  echo "kernellab: dockerd did not start; last lines of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
echo "started dockerd $(docker version --format '{{.Server.Version}}') (log: $log)"
