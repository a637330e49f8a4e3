#!/usr/bin/env bash
# Runs the whole test suite (race detector, real servers, every test twice)
# while busy-loop processes oversubscribe every CPU ten times over, the way
# a loaded shared CI machine does, to find tests that depend on a lucky
# schedule. The load is bounded: each busy loop ends after
# STRESS_MAX_SECONDS even if this script is killed, is stopped (by its own
# process id) as soon as the suite ends, and each test binary has a timeout.
#
# The test binaries are built (compiled and linked: about 100 s on a quiet
# 2-core machine, ten times that under the load) before the load starts,
# then run as `go test` would run them, in their package's directory,
# because building is not what is under test. Each package's output is kept
# in STRESS_DIR/<package>.log.
#
# Two binaries per CPU run at once, the slowest packages first: with one
# per CPU in import-path order a run took 100 minutes here, most of its end
# spent on transport alone, started last. More binaries beside the same
# busy loops give each test less of a CPU, not more, so the load per test
# only grows.
#
#   STRESS_PROCS        busy loops (default: 10 per CPU)
#   STRESS_JOBS         test binaries at once (default: 2 per CPU)
#   STRESS_FIRST        packages started first, the slowest under load
#   STRESS_COUNT        runs of each test (default 2)
#   STRESS_MAX_SECONDS  longest a busy loop lives (default 14400)
#   STRESS_TIMEOUT      -test.timeout per package binary (default 90m)
#   STRESS_PKGS         packages (default ./...)
#   STRESS_DIR          where binaries and logs go (default: a new temp dir)
#   RACEFLAGS           the race flags (default: the Makefile's)
set -euo pipefail

cpus=$(nproc)
procs=${STRESS_PROCS:-$(( 10 * cpus ))}
jobs=${STRESS_JOBS:-$(( 2 * cpus ))}
first=${STRESS_FIRST:-transport odata server lease actors internal/rlqssim internal/doctest quota cmd/sluice}
count=${STRESS_COUNT:-2}
max=${STRESS_MAX_SECONDS:-14400}
timeout=${STRESS_TIMEOUT:-90m}
pkgs=${STRESS_PKGS:-./...}
raceflags=${RACEFLAGS:--race -gcflags=modernc.org/...=-race=false}
go=${GO:-go}
dir=${STRESS_DIR:-$(mktemp -d /tmp/sluice-stress.XXXXXX)}
mkdir -p "$dir"

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

# Every package with tests: its import path, directory and binary.
mod=$("$go" list -m)
list=()
while read -r path pdir; do
	name=${path#"$mod"}
	name=${name#/}
	list+=("$path $pdir $dir/$(echo "${name:-root}" | tr '/.' '__').test")
done < <("$go" list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' $pkgs)

# The slowest first, so that none of them starts when the rest are done.
ordered=()
for f in $first; do
	for i in "${!list[@]}"; do
		if [ "${list[$i]%% *}" = "$mod/$f" ]; then
			ordered+=("${list[$i]}")
			unset "list[$i]"
		fi
	done
done
list=("${ordered[@]}" "${list[@]}")
echo "test-stress: building ${#list[@]} test binaries into $dir"
for entry in "${list[@]}"; do
	read -r path pdir bin <<<"$entry"
	# shellcheck disable=SC2086
	"$go" test $raceflags -c -o "$bin" "$path"
done

for _ in $(seq "$procs"); do
	timeout "$max" sh -c 'while :; do :; done' &
	pids+=("$!")
done
echo "test-stress: $procs busy loops on $cpus CPUs (at most ${max}s each) beside ${#list[@]} test binaries, $jobs at a time: -test.count=$count -test.timeout=$timeout"

# run_one runs one package's binary in its directory and prints go test's
# one-line verdict; the output is in its log, printed too when it fails.
run_one() {
	local path=$1 pdir=$2 bin=$3 log start rc=0
	log="$dir/$(basename "$bin" .test).log"
	start=$(date +%s)
	(cd "$pdir" && SLUICE_REQUIRE_SERVERS=1 "$bin" -test.paniconexit0 -test.count="$count" -test.timeout="$timeout") >"$log" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "ok   $path $(( $(date +%s) - start ))s"
	else
		cat "$log"
		echo "FAIL $path $(( $(date +%s) - start ))s (exit $rc, log $log)"
	fi
	return "$rc"
}

start=$(date +%s)
status=0
declare -A running=() # pids of the test binaries' runs
# reap waits for one run to end (only runs: the busy loops are jobs too).
reap() {
	local done_pid=""
	wait -n -p done_pid "${!running[@]}" || status=1
	unset "running[$done_pid]"
}
for entry in "${list[@]}"; do
	if [ "${#running[@]}" -ge "$jobs" ]; then
		reap
	fi
	# shellcheck disable=SC2086
	run_one $entry &
	running[$!]=1
done
while [ "${#running[@]}" -gt 0 ]; do
	reap
done
echo "test-stress: suite took $(( $(date +%s) - start ))s under load, exit status $status"
exit $status
