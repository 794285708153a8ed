#!/usr/bin/env bash
# Tools the integration tests drive from outside the container (`make test-tools`; `make test` runs it):
# - Debian's chromium, headless: loads the JupyterLab page `invoke notebook` serves (tests/test_devenv_docker.py);
# - the Dev Containers CLI (npm @devcontainers/cli, pinned here) brings up the file `invoke devcontainer` writes;
# - Debian's slurm-wlm, munge, charliecloud and squashfs-tools: the one-node Slurm of tests/slurm that the cluster
#   tests submit to (tests/test_cluster_slurm.py), with Charliecloud as one of the nodes' runtimes;
# - Debian's Nsight Systems (trixie's, for CUDA 12.4), unpacked by docker/nsight-systems.sh under /opt/nvidia: the
#   timeline tests capture CPU programs with it, natively and mounted into the default image (tests/test_nsys*.py);
# - Debian's openssh-server and rsync: the remote-host tests reach this machine's Docker engine through an sshd on
#   127.0.0.1 that they start with keys they make (tests/test_remote_docker.py); its system service is not started.
# Idempotent, and never fatal: as root it installs missing OS packages; otherwise (or offline) it says
# what is missing and goes on (those tests then skip, or fail where KERNELLAB_REQUIRE_DOCKER=1, as in CI).
set -euo pipefail
cd "$(dirname "$0")/.."
# The newest release that also runs on Debian 12's own nodejs (18); later ones need node 20.
DEVCONTAINERS_CLI_VERSION=0.83.0
PREFIX=.cache/devcontainers-cli
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || need+=(munge)
command -v ch-run >/dev/null 2>&1 || need+=(charliecloud)
command -v mksquashfs >/dev/null 2>&1 || need+=(squashfs-tools)
command -v rsync >/dev/null 2>&1 || need+=(rsync)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "kernellab: the notebook, devcontainer and cluster tests need ${need[*]}; run \`sudo make test-tools\` once." >&2
  else
    echo "installing ${need[*]} from the OS archive"
    # No service starts while installing (openssh-server's would listen on port 22): the tests start their own.
    policy=/usr/sbin/policy-rc.d
    made_policy=; [ -e $policy ] || { printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy && made_policy=1; }
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; } \
      || echo "kernellab: could not install ${need[*]} (see above); the tests that need them will say so." >&2
    [ -z "$made_policy" ] || rm -f $policy
  fi
fi
if command -v npm >/dev/null 2>&1; then
  have=$(node -p "require('./$PREFIX/node_modules/@devcontainers/cli/package.json').version" 2>/dev/null || true)
  if [ "$have" != "$DEVCONTAINERS_CLI_VERSION" ]; then
    echo "installing @devcontainers/cli@$DEVCONTAINERS_CLI_VERSION under $PREFIX"
    npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "@devcontainers/cli@$DEVCONTAINERS_CLI_VERSION" \
      || echo "kernellab: npm could not install @devcontainers/cli (see above); the devcontainer tests will say so." >&2
  fi
  if [ -x "$PREFIX/node_modules/.bin/devcontainer" ]; then
    echo "devcontainer CLI $("$PREFIX/node_modules/.bin/devcontainer" --version) at $PREFIX/node_modules/.bin/devcontainer"
  fi
fi
NSYS_VERSION=2023.4.4.54~12.4.1-2
NSYS_PREFIX=/opt/nvidia/nsight-systems/2023.4.4
if [ ! -x "$NSYS_PREFIX/bin/nsys" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "kernellab: the timeline tests need Debian's Nsight Systems; run \`sudo make test-tools\` once." >&2
  else
    echo "installing Debian's Nsight Systems $NSYS_VERSION under $NSYS_PREFIX"
    bash docker/nsight-systems.sh "$NSYS_VERSION" "$NSYS_PREFIX" >/dev/null \
      || echo "kernellab: could not install Nsight Systems (see above); the timeline tests will say so." >&2
  fi
fi
[ -x "$NSYS_PREFIX/bin/nsys" ] && "$NSYS_PREFIX/bin/nsys" --version
if command -v chromium >/dev/null 2>&1; then echo "$(chromium --version 2>/dev/null | head -1)"; fi
