#!/usr/bin/env bash
# `--on slurm` on the GPU machine: a one-node Slurm from the bundle in .gpu-host/ (make-slurm-bundle.sh),
# then the kernel tests and a quick bench of OPS through the gpuhost image (runtime docker, devices mode).
# Run after `.ci/gpu-host.sh shell` in the same command (Docker running, kernellab:gpuhost built).
#   bash .ci/gpu-slurm.sh [OPS]        (default: vector_add; the gpuhost target; results under $OUT/slurm-*)
set -uo pipefail
out=${OUT:-gpu-host-logs}; mkdir -p "$out"
ops=${1:-vector_add}
export PYTHONUNBUFFERED=1 KERNELLAB_CACHE=${KERNELLAB_CACHE:-/tmp/klcache} PYTHONPATH=/tmp/site:$PWD/src
export PATH=/tmp/sl/bin:/tmp/dk/bin:$PATH
bash .gpu-host/start-slurm.sh > "$out/slurm-start.log" 2>&1 || { tail -n 20 "$out/slurm-start.log"; exit 1; }
sinfo -o '%N %G %t' | tee -a "$out/slurm-start.log"
type=$(sinfo -h -o '%G' | grep -oE 'gpu:[a-z0-9]+' | head -n 1 | cut -d: -f2)
mkdir -p /tmp/klshared
cat > /tmp/kl-cluster.toml <<TOML
scheduler = "slurm"
runtime = "docker"
shared = "/tmp/klshared"
gpu_mode = "devices"
load_images = false
time = "20"
[gpu_types]
$type = "--gres=gpu:$type:1"
TOML
rc=0
for kind in test bench; do
  echo "=== invoke $kind --on slurm --gpus $type -k $ops"
  python3 -m invoke $kind --on slurm --target gpuhost --cluster /tmp/kl-cluster.toml --gpus "$type" -k "$ops" \
    $([ $kind = bench ] && echo --quick) 2>&1 | tee "$out/slurm-$kind.txt" | tail -n 25
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  run=$(grep -oE 'results/[A-Za-z0-9_.-]+' "$out/slurm-$kind.txt" | tail -n 1)
  [ -n "$run" ] && [ -d "$run" ] && tar -C "$(dirname "$run")" -czf "$out/slurm-$kind.tgz" "$(basename "$run")"
done
exit $rc
