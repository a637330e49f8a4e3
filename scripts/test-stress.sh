#!/usr/bin/env bash
# Runs the whole test suite (race detector, real servers, every test twice)
# while busy-loop processes oversubscribe every CPU ten times over, the way
# a loaded shared CI machine does, to find tests that depend on a lucky
# schedule. The load is bounded: each busy loop ends after
# STRESS_MAX_SECONDS even if this script is killed, is stopped (by its own
# process id) as soon as the suite ends, and the suite has a timeout.
#
#   STRESS_PROCS        busy loops (default: 10 per CPU)
#   STRESS_COUNT        runs of each test (default 2)
#   STRESS_MAX_SECONDS  longest a busy loop lives (default 5400)
#   STRESS_TIMEOUT      go test -timeout per package binary (default 60m)
#   STRESS_PKGS         packages (default ./...)
#   RACEFLAGS           the race flags (default: the Makefile's)
set -euo pipefail

cpus=$(nproc)
procs=${STRESS_PROCS:-$(( 10 * cpus ))}
count=${STRESS_COUNT:-2}
max=${STRESS_MAX_SECONDS:-5400}
timeout=${STRESS_TIMEOUT:-60m}
pkgs=${STRESS_PKGS:-./...}
raceflags=${RACEFLAGS:--race -gcflags=modernc.org/...=-race=false}
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

# Build (and vet) the test binaries before the load starts: compiling is
# not what is under test, and under the load it would take most of the time.
# shellcheck disable=SC2086
"$go" test $raceflags -count=1 -run '^$' $pkgs >/dev/null

for _ in $(seq "$procs"); do
	timeout "$max" sh -c 'while :; do :; done' &
	pids+=("$!")
done
echo "test-stress: $procs busy loops on $cpus CPUs (at most ${max}s each) beside: go test $raceflags -count=$count $pkgs"
start=$(date +%s)
status=0
# shellcheck disable=SC2086
SLUICE_REQUIRE_SERVERS=1 "$go" test $raceflags -count="$count" -timeout "$timeout" $pkgs || status=$?
echo "test-stress: suite took $(( $(date +%s) - start ))s under load, exit status $status"
exit $status
