#!/usr/bin/env bash
# Runs the whole test suite (race detector, real servers) while busy-loop
# processes compete for every CPU, the way a shared CI machine does, to
# find tests that depend on a lucky schedule. The load is bounded: each
# busy loop ends after STRESS_MAX_SECONDS even if this script is killed,
# and is stopped (by its own process id) as soon as the suite ends.
#
#   STRESS_PROCS        busy loops (default: 2 per CPU)
#   STRESS_MAX_SECONDS  longest a busy loop lives (default 1800)
#   STRESS_PKGS         packages (default ./...)
set -euo pipefail

procs=${STRESS_PROCS:-$(( 2 * $(nproc) ))}
max=${STRESS_MAX_SECONDS:-1800}
pkgs=${STRESS_PKGS:-./...}
go=${GO:-go}

pids=()
stop_load() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
}
trap stop_load EXIT

for _ in $(seq "$procs"); do
	timeout "$max" sh -c 'while :; do :; done' &
	pids+=("$!")
done
echo "test-stress: $procs busy loops (at most ${max}s each) beside: go test -race $pkgs"
start=$(date +%s)
status=0
SLUICE_REQUIRE_SERVERS=1 "$go" test -race -count=1 -timeout 30m $pkgs || status=$?
echo "test-stress: suite took $(( $(date +%s) - start ))s under load, exit status $status"
exit $status
