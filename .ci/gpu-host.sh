#!/usr/bin/env bash
# Verification on the GPU machine (no network, no Docker, no invoke there): bring Docker from the
# bundle in .gpu-host/ (dockerbins.tar.xz and start-docker.sh, from the lab's GPU-host kit), install carried wheels (.whl/),
# then exercise kernellab the way a user would. Logs go to $OUT (or ./gpu-host-logs).
#   bash .ci/gpu-host.sh [doctor] [shell] [test] [native] [bench] [recipe-build] [recipe-run] [liger-run] [liger-bench]
#                        [timeline] [recipe-profile] [remote] [norms-bench]
#   (default: the first five; recipe-build and recipe-run build and run the demo recipe, recipes/demo, whose
#   sources are its own folders: its CUDA half runs here)
set -uo pipefail
out=${OUT:-gpu-host-logs}; mkdir -p "$out"
steps=${*:-doctor shell test native bench}
# KERNELLAB_REQUIRE_GPU: a GPU test that cannot find the GPU fails here instead of skipping
# (kernellab passes KERNELLAB_* variables into its containers).
export PYTHONUNBUFFERED=1 KERNELLAB_CACHE=/tmp/klcache KERNELLAB_REQUIRE_GPU=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
t0=$(date +%s)
export PATH=/tmp/dk/bin:$PATH
# The site-base import tars the live system: tar may exit non-zero on a file that changed while
# read. What matters is that the engine runs and the image exists; try twice, then check that.
for try in 1 2; do
  bash -x .gpu-host/start-docker.sh --site-base >>"$out/docker.log" 2>&1 && break
  echo "start-docker.sh exited $? (try $try)"
done
docker info >/dev/null 2>&1 || { echo "no docker engine"; tail -n 30 "$out/docker.log" /tmp/dockerd.log; exit 1; }
if ! docker image inspect kernellab-site-base:gpuhost >/dev/null 2>&1; then
  # Import it ourselves, ignoring tar's complaints about files that change while read.
  tar -C / --exclude=usr/share/doc --exclude=usr/share/man --exclude=usr/local/nvidia \
      --warning=no-file-changed -c bin lib lib64 sbin usr etc opt/torch 2>/dev/null \
    | docker import -c 'ENV PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib' - kernellab-site-base:gpuhost >/dev/null
fi
docker image inspect kernellab-site-base:gpuhost --format 'site base {{.Id}} {{.Size}}' || { tail -n 30 "$out/docker.log"; exit 1; }
echo "docker + site base ready in $(( $(date +%s) - t0 )) s"
inv() { python3 -m invoke "$@"; }
rc=0
for step in $steps; do
  echo "=== $step"
  case $step in
    doctor) inv doctor --target gpuhost 2>&1 | tee "$out/doctor.txt"; inv doctor --target gpuhost --json > "$out/doctor.json" ;;
    shell)  inv build-image --target gpuhost > "$out/build.txt" 2>&1 || rc=1; tail -n 6 "$out/build.txt"
            inv shell --target gpuhost --gpu-mode devices \
              --cmd "python -c 'import torch, os; print(torch.cuda.get_device_name(0), torch.__version__, os.getuid())'" \
              2>&1 | tee "$out/shell.txt" || rc=1 ;;
    test)   inv test --target gpuhost --gpu-mode devices 2>&1 | tee "$out/test-container.txt" | tail -n 8
            if [ "${PIPESTATUS[0]}" != 0 ]; then
              rc=1; log=$(ls /tmp/klcache/torch_extensions/*/build.log 2>/dev/null | head -n 1)
              [ -n "$log" ] && { cp "$log" "$out/build-failure.log"; grep -iE "error|fatal" "$log" | head -n 10; }
            fi ;;
    native) inv test --native 2>&1 | tee "$out/test-native.txt" | tail -n 8; [ "${PIPESTATUS[0]}" = 0 ] || rc=1 ;;
    recipe-build)
            inv build-image --target gpuhost > "$out/build.txt" 2>&1 || { rc=1; tail -n 20 "$out/build.txt"; }
            s=$(date +%s%N); inv recipe build demo --target gpuhost > "$out/recipe-build.txt" 2>&1 || rc=1
            echo "cold recipe build: $(( ($(date +%s%N) - s) / 1000000 )) ms"; tail -n 25 "$out/recipe-build.txt"
            s=$(date +%s%N); inv recipe build demo --target gpuhost 2>&1 | tail -n 2
            echo "unchanged recipe build: $(( ($(date +%s%N) - s) / 1000000 )) ms" ;;
    recipe-run)
            inv recipe run demo --target gpuhost --gpu-mode devices ${RECIPE_FLAGS:-} 2>&1 \
              | tee "$out/recipe-run.txt" | tail -n 45; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            tar -C results/recipes -czf "$out/recipe-demo.tgz" demo ;;  # one file: the run folder nests deeper than $OUT returns
    liger-run)  # Liger-Kernel from its wheel in .whl/ (the machine has no network): --wheelhouse installs offline
            inv recipe run liger --target gpuhost --gpu-mode devices --wheelhouse .whl 2>&1 \
              | tee "$out/liger-run.txt" | tail -n 40; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            tar -C results/recipes -czf "$out/recipe-liger.tgz" liger
            cp recipes/liger/locks/gpuhost.json "$out/liger-lock-gpuhost.json" 2>/dev/null ;;
    liger-bench)  # kernels/layernorm against Liger-Kernel's LayerNorm, in the liger recipe's image (built offline from .whl/)
            inv bench -k layernorm --against liger --wheelhouse .whl --target gpuhost --gpu-mode devices \
              --out results/layernorm-vs-liger-h100 2>&1 | tee "$out/liger-bench.txt" | tail -n 30
            [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            tar -C results -czf "$out/bench-liger.tgz" layernorm-vs-liger-h100 ;;
    timeline)  # Nsight Systems: the host's nsys natively, the site image's in the container, Liger-Kernel beside ours
            inv profile -k softmax --timeline --native --out results/h100-timeline/native 2>&1 | tee "$out/timeline-native.txt" | tail -n 20
            [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            inv build-image --target gpuhost > "$out/build.txt" 2>&1 || { rc=1; tail -n 20 "$out/build.txt"; }
            inv profile -k softmax --timeline --target gpuhost --gpu-mode devices --out results/h100-timeline/container \
              2>&1 | tee "$out/timeline-container.txt" | tail -n 20; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            inv recipe build liger --target gpuhost --wheelhouse .whl > "$out/liger-build.txt" 2>&1 || { rc=1; tail -n 20 "$out/liger-build.txt"; }
            inv profile -k layernorm --timeline --against liger --target gpuhost --gpu-mode devices \
              --out results/h100-timeline/layernorm-vs-liger 2>&1 | tee "$out/timeline-liger.txt" | tail -n 30
            [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            python3 -m pytest tests/test_profile_gpu.py -k timeline -q -p no:cacheprovider 2>&1 | tail -n 5 | tee "$out/timeline-tests.txt"
            find results/h100-timeline -name '*.nsys-rep' -size +4M -delete   # the summaries and pictures come back
            tar -C results -czf "$out/timeline.tgz" h100-timeline ;;
    recipe-profile)  # where a reproduced paper's time goes: the demo's CUDA binary and Liger-Kernel's Triton kernels
            inv recipe profile demo --experiment tiled-cuda --target gpuhost --gpu-mode devices 2>&1 \
              | tee "$out/recipe-profile-demo.txt" | tail -n 30
            [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            inv recipe build liger --target gpuhost --wheelhouse .whl > "$out/liger-build.txt" 2>&1 || rc=1
            inv recipe profile liger --target gpuhost --gpu-mode devices 2>&1 | tee "$out/recipe-profile-liger.txt" | tail -n 30
            [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            tar -C results/recipes -czf "$out/recipe-profiles.tgz" --exclude='*.nsys-rep' --exclude='*.sqlite' \
              demo/profiles liger/profiles 2>/dev/null ;;
    remote)  # --host ssh://: this machine's engine through an sshd on 127.0.0.1 with keys made here, the GPU attached
            d=$(mktemp -d); port=$(( 20000 + RANDOM % 20000 )); sshd=/usr/sbin/sshd
            missing=; for t in /usr/sbin/sshd ssh ssh-keygen rsync; do command -v $t >/dev/null || missing="$missing $t"; done
            mkdir -p $d/bin
            if [ -n "$missing" ] && [ -f .gpu-host/ssh-kit.tar.gz ]; then
              # Debian bookworm's openssh and rsync (dpkg -x of the packages and their libraries: the lab's GPU-host
              # kit), for a machine without them; wrappers put their libraries on the path.
              mkdir -p /tmp/sshkit && tar -C /tmp/sshkit -xzf .gpu-host/ssh-kit.tar.gz
              libs=/tmp/sshkit/usr/lib/x86_64-linux-gnu:/tmp/sshkit/lib/x86_64-linux-gnu
              for t in ssh ssh-keygen rsync; do
                printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec /tmp/sshkit/usr/bin/%s "$@"\n' $libs $t > $d/bin/$t.real; chmod +x $d/bin/$t.real
              done
              printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec /tmp/sshkit/usr/sbin/sshd "$@"\n' $libs > $d/sshd; chmod +x $d/sshd
              sshd=$d/sshd; export PATH=$d/bin-kit:$PATH; mkdir -p $d/bin-kit
              for t in ssh-keygen rsync; do cp $d/bin/$t.real $d/bin-kit/$t; done
              grep -q '^sshd:' /etc/passwd || echo 'sshd:x:74:65534:sshd:/run/sshd:/usr/sbin/nologin' >> /etc/passwd
              missing=
            fi
            if [ -n "$missing" ]; then echo "remote: this machine lacks$missing" | tee "$out/remote.txt"; rc=1; continue; fi
            ssh-keygen -q -t ed25519 -N '' -f $d/host_key; ssh-keygen -q -t ed25519 -N '' -f $d/client_key
            cp $d/client_key.pub $d/authorized_keys; mkdir -p /run/sshd
            printf 'Port %s\nListenAddress 127.0.0.1\nHostKey %s/host_key\nAuthorizedKeysFile %s/authorized_keys\nPidFile %s/pid\nStrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\nSetEnv PATH=%s DOCKER_HOST=%s\n' \
              $port $d $d $d "$PATH" "${DOCKER_HOST:-unix:///var/run/docker.sock}" > $d/sshd_config
            "$sshd" -f $d/sshd_config -E $d/sshd.log; sleep 1
            printf 'Host 127.0.0.1\n  IdentityFile %s/client_key\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' $d > $d/ssh_config
            real_ssh=$( [ -x $d/bin/ssh.real ] && echo $d/bin/ssh.real || command -v ssh )
            printf '#!/bin/sh\nexec %s -F %s/ssh_config "$@"\n' "$real_ssh" $d > $d/bin/ssh; chmod +x $d/bin/ssh
            [ -x $d/bin/rsync.real ] && cp $d/bin/rsync.real $d/bin/rsync
            PATH=$d/bin:$PATH ssh -p $port root@127.0.0.1 'echo ssh ok; command -v docker rsync' 2>&1 | tee "$out/remote.txt"
            PATH=$d/bin:$PATH docker --host "ssh://root@127.0.0.1:$port" version 2>&1 | tail -n 4 | tee -a "$out/remote.txt"
            tail -n 5 $d/sshd.log
            docker image inspect kernellab:gpuhost >/dev/null 2>&1 || inv build-image --target gpuhost > "$out/build.txt" 2>&1 || rc=1
            PATH=$d/bin:$PATH inv test --host "ssh://root@127.0.0.1:$port" --target gpuhost -k "softmax or rmsnorm" 2>&1 \
              | tee -a "$out/remote.txt" | tail -n 12; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            PATH=$d/bin:$PATH inv bench --quick --host "ssh://root@127.0.0.1:$port" --target gpuhost -k rmsnorm 2>&1 \
              | tee -a "$out/remote.txt" | tail -n 12; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            kill "$(cat $d/pid)" 2>/dev/null ;;
    norms-bench)  # layernorm, rmsnorm, softmax natively against Liger-Kernel (its wheel in .whl/, installed above),
            # MIN_TIME s of measured time per function (default 0.1: a device session's budget), into results/<gpu>-norms/;
            # each op's whole folder comes back (samples too, so `invoke bench --compare` can use it)
            gpu=$(python3 -c 'import torch; print(torch.cuda.get_device_name(0).split()[1].lower())')
            ran=()
            for op in ${NORMS_OPS:-layernorm rmsnorm softmax}; do
              if inv bench -k "$op" --against liger --native --min-time "${MIN_TIME:-0.1}" --out "results/$gpu-norms/$op" \
                   > "$out/bench-$op.txt" 2>&1; then ran+=("results/$gpu-norms/$op"); else rc=1; fi
              tail -n 3 "$out/bench-$op.txt"; tar -C results -czf "$out/norms-$op.tgz" "$gpu-norms/$op"
            done
            # every row of the runs that finished against its fastest valid baseline (a failed run's folder may
            # hold an older run: left out), and how many are below 1.0x
            if [ ${#ran[@]} -gt 0 ]; then
              python3 benchmarks/versus_best.py "${ran[@]}" > "$out/versus-best.md" || rc=1
              grep -E '^[0-9]+ rows:' "$out/versus-best.md"
            fi ;;
    bench)  inv bench --target gpuhost --quick --out results/gpuhost-quick 2>&1 | tee "$out/bench.txt" | tail -n 60
            [ "${PIPESTATUS[0]}" = 0 ] || rc=1
            cp results/gpuhost-quick/summary.md "$out/bench-summary.md" 2>/dev/null ;;
  esac
done
exit $rc
