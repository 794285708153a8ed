#!/usr/bin/env bash
# `invoke watch` on the GPU machine: the devloop figures natively (benchmarks/devloop.py --watch), then
# the watcher in the gpuhost container driven by real edits of a kernel source. Run after
# `.ci/gpu-host.sh doctor shell` in the same command (Docker running, kernellab:gpuhost built).
#   bash .ci/gpu-watch.sh [OP ...]        (default: vector_add softmax; NATIVE=0: the container part only)
set -uo pipefail
out=${OUT:-gpu-host-logs}; mkdir -p "$out"
ops=${*:-vector_add softmax}
export PYTHONUNBUFFERED=1 KERNELLAB_CACHE=${KERNELLAB_CACHE:-/tmp/klcache} PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/dk/bin:$PATH
rc=0
for op in $ops; do
  [ "${NATIVE:-1}" = 0 ] && break
  echo "=== native devloop --watch $op"
  python3 benchmarks/devloop.py --watch --op "$op" --json "$out/devloop-$op.json" 2>&1 | tee "$out/devloop-$op.txt" | tail -n 12
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
done
# A --base-image target has only what the site image has: add watchfiles from the carried wheels.
if ! docker run --rm --entrypoint python3 kernellab:gpuhost -c "import watchfiles" >/dev/null 2>&1; then
  ctx=$(mktemp -d); cp .whl/watchfiles-*.whl .whl/anyio-*.whl .whl/idna-*.whl .whl/typing_extensions-*.whl "$ctx/"
  printf 'FROM kernellab:gpuhost\nCOPY *.whl /tmp/w/\nRUN python3 -m pip install --no-index --no-deps /tmp/w/*.whl && rm -rf /tmp/w\n' > "$ctx/Dockerfile"
  docker build -q --network none -t kernellab:gpuhost "$ctx" >/dev/null || { echo "could not add watchfiles"; exit 1; }
fi
for op in $ops; do
  echo "=== invoke watch --target gpuhost -k $op (container)"
  src=$(ls kernels/$op/*.cu | head -n 1); cp "$src" /tmp/kl-watch-orig
  log="$out/watch-container-$op.txt"
  setsid python3 -m invoke watch --target gpuhost --gpu-mode devices -k "$op" > "$log" 2>&1 &
  pid=$!
  want=1
  waitfor() { for _ in $(seq 600); do [ "$(grep -c '^\(PASS\|FAIL\|ERROR\)' "$log")" -ge "$1" ] && return 0; sleep 0.2; done; return 1; }
  waitfor 1 || { echo "no first result"; tail -n 30 "$log"; rc=1; }
  for i in 1 2 3 4 5; do
    want=$((want + 1))
    sleep 2  # as between real saves (and benchmarks/devloop.py): the next round is forked and prepared
    echo "static const int kl_watch_edit_$i = $i;" >> "$src"
    waitfor $want || { echo "no result after edit $i"; rc=1; break; }
  done
  cp /tmp/kl-watch-orig "$src"
  grep '^\(PASS\|FAIL\|ERROR\)' "$log"
  kill -INT -- -"$pid"; sleep 5
  left=$(docker ps -q --filter name=kernellab- | wc -l)
  echo "containers left after Ctrl-C: $left"; [ "$left" = 0 ] || rc=1
done
exit $rc
