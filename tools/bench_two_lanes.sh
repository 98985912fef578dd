#!/usr/bin/env bash
# Two nox lanes side by side, nothing cached: what running independent units at once
# (Bazel's --jobs) would gain on this machine. Run from a checkout whose venvs exist.
#   bash tools/bench_two_lanes.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export CI=true DSV4_CACHE=off
out=$(mktemp -d)
now() { date +%s.%N; }
start=$(now)
lane() {
    local name=$1; shift
    local begin; begin=$(now)
    python3 -m nox -s "$@" >"$out/$name.log" 2>&1
    echo "$name rc=$? $(python3 -c "print(round($(now) - $begin, 1))") s: $*"
}
lane a meta vllm evals lint build &
lane b policy evals-server kernels report &
wait
echo "both: $(python3 -c "print(round($(now) - $start, 1))") s (logs in $out)"
