#!/usr/bin/env bash
# ghz (or a k6 script) against several RLS servers in turn, on the same
# fresh Redis and the same rules (loadtest/rules/loadtest.yaml), with the
# tool on a core of its own so that the tool is not what is measured.
# docs/benchmarks.md explains it.
#
#   loadtest/ghz/side-by-side.sh NAME=COMMAND [NAME=COMMAND...]
#   loadtest/ghz/side-by-side.sh sluice="bin/sluice ratelimit" reference=/path/to/ratelimit
#
# Each COMMAND is configured by the environment only (the variables both
# sluice and envoyproxy/ratelimit read), listens on loopback, and is stopped
# with SIGTERM after its runs. Settings (environment):
#   CONFIGS   ghz configs of loadtest/ghz, default "hot-key keys-1000 descriptors-3"
#   DURATION  per run, default 15s
#   RPS       0: as fast as the callers go (closed loop); N: N calls/s in all
#   GHZ_CPUS  the cores ghz may use (taskset list), default 0
#   SUT_CPUS  the cores the server and Redis may use, default 1
#   GHZ       the ghz binary, default ghz on PATH or in $(go env GOPATH)/bin
#   K6_SCRIPT instead of ghz, run this k6 script (loadtest/k6/grpc.js or
#             json.js) at RATE calls/s (default 500) for DURATION; CONFIGS
#             is then ignored, and the row says whether its thresholds held
#   K6        the k6 binary, default k6 on PATH or in $(go env GOPATH)/bin
# One markdown row per system and config on stdout: calls/s, latency, errors,
# CPU per 1,000 calls of the server, of Redis and of ghz itself, and how much
# of its cores ghz used (near 100 % means ghz, not the server, set the pace).
set -euo pipefail

CONFIGS=${CONFIGS:-"hot-key keys-1000 descriptors-3"}
DURATION=${DURATION:-15s}
RPS=${RPS:-0}
GHZ_CPUS=${GHZ_CPUS:-0}
SUT_CPUS=${SUT_CPUS:-1}
GHZ=${GHZ:-$(command -v ghz || echo "$(go env GOPATH)/bin/ghz")}
K6=${K6:-$(command -v k6 || echo "$(go env GOPATH)/bin/k6")}
K6_SCRIPT=${K6_SCRIPT:-}
RATE=${RATE:-500}
[ $# -gt 0 ] || { sed -n '2,26p' "$0" >&2; exit 2; }
tool=$GHZ
if [ -n "$K6_SCRIPT" ]; then tool=$K6; CONFIGS=$(basename "$K6_SCRIPT"); fi
for t in "$tool" redis-server redis-cli curl jq taskset; do
	command -v "$t" >/dev/null || { echo "side-by-side: $t not found" >&2; exit 1; }
done
[ -f loadtest/ghz/rls.protoset ] || { echo "side-by-side: run from the repository root after go run ./loadtest/protoset -out loadtest/ghz" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/rt/ratelimit/config"
cp loadtest/rules/loadtest.yaml "$work/rt/ratelimit/config/"

# free_port asks the kernel for a free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# ticks is a process's user+system CPU in clock ticks.
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

rport=$(free_port)
taskset -c "$SUT_CPUS" redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
redis=$!
pids+=("$redis")
for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

# k6run runs K6_SCRIPT against one server and prints its row.
k6run() {
	local name=$1 srv=$2 http=$3 grpc=$4 s0 r0 s1 r1 wall user sys thr
	s0=$(ticks "$srv") r0=$(ticks "$redis")
	thr=held
	/usr/bin/time -f "%e %U %S" -o "$work/time" taskset -c "$GHZ_CPUS" "$K6" run -q -e DURATION="$DURATION" -e RATE="$RATE" \
		-e SLUICE_HTTP_ADDR="127.0.0.1:$http" -e SLUICE_GRPC_ADDR="127.0.0.1:$grpc" \
		--summary-trend-stats "med,p(99)" --summary-export "$work/out.json" "$K6_SCRIPT" >"$work/k6.out" 2>&1 || thr=crossed
	s1=$(ticks "$srv") r1=$(ticks "$redis")
	read -r wall user sys < <(tail -1 "$work/time")
	jq -r --arg name "$name" --arg c "$(basename "$K6_SCRIPT")" --arg rate "$RATE" --arg thr "$thr" \
		--argjson scpu "$(((s1 - s0) * 1000 / hz))" --argjson rcpu "$(((r1 - r0) * 1000 / hz))" \
		--argjson gcpu "$(echo "($user + $sys) * 1000" | bc)" --argjson wall "$wall" --argjson cores "$ncores" '
		def ms: (. * 100 | round) / 100 | tostring + " ms";
		(.metrics.grpc_req_duration // .metrics.http_req_duration) as $d | .metrics.iterations.count as $n |
		def per1k($cpu): if $n > 0 then ($cpu * 1000 / $n * 10 | round) / 10 else "-" end;
		[$name, $c, $rate, (.metrics.iterations.rate | round), ($d.med | ms), ($d["p(99)"] | ms),
		 (.metrics.dropped_iterations.count // 0), $thr,
		 per1k($scpu), per1k($rcpu), per1k($gcpu),
		 (($gcpu / 1000 / $wall / $cores * 100 | round | tostring) + " %")]
		| "| " + (map(tostring) | join(" | ")) + " |"' "$work/out.json"
}

ncores=$(taskset -c "$GHZ_CPUS" nproc)
if [ -n "$K6_SCRIPT" ]; then
	echo "| system | script | rate asked | calls/s | p50 | p99 | dropped | thresholds | server CPU ms/1k | Redis CPU ms/1k | k6 CPU ms/1k | k6 use of its cores |"
	echo "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"
else
	echo "| system | config | rps asked | calls/s | p50 | p99 | errors | server CPU ms/1k | Redis CPU ms/1k | ghz CPU ms/1k | ghz use of its cores |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
fi
for spec in "$@"; do
	name=${spec%%=*}
	cmd=${spec#*=}
	http=$(free_port) grpc=$(free_port) debug=$(free_port)
	redis-cli -p "$rport" flushall >/dev/null
	# shellcheck disable=SC2086 # cmd is a command line
	env BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" \
		RUNTIME_ROOT="$work/rt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		USE_STATSD=false LOG_LEVEL=warn HOST=127.0.0.1 PORT="$http" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc" \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug" \
		taskset -c "$SUT_CPUS" $cmd >"$work/$name.log" 2>&1 &
	srv=$!
	pids+=("$srv")
	up=""
	for _ in $(seq 200); do
		if curl -fs "http://127.0.0.1:$http/healthcheck" >/dev/null 2>&1; then up=1; break; fi
		kill -0 "$srv" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$up" ] || { echo "side-by-side: $name did not become healthy:" >&2; tail -20 "$work/$name.log" >&2; exit 1; }
	if [ -n "$K6_SCRIPT" ]; then
		k6run "$name" "$srv" "$http" "$grpc"
		kill -TERM "$srv"
		wait "$srv" 2>/dev/null || true
		continue
	fi
	for c in $CONFIGS; do
		s0=$(ticks "$srv") r0=$(ticks "$redis")
		/usr/bin/time -f "%e %U %S" -o "$work/time" taskset -c "$GHZ_CPUS" "$GHZ" --config "loadtest/ghz/$c.json" \
			-z "$DURATION" --rps "$RPS" --cpus "$ncores" -O json "127.0.0.1:$grpc" >"$work/out.json" 2>"$work/ghz.err" ||
			{ echo "side-by-side: ghz failed on $name/$c:" >&2; cat "$work/ghz.err" >&2; exit 1; }
		s1=$(ticks "$srv") r1=$(ticks "$redis")
		read -r wall user sys < <(tail -1 "$work/time")
		jq -r --arg name "$name" --arg c "$c" --arg rps "$RPS" \
			--argjson scpu "$(((s1 - s0) * 1000 / hz))" --argjson rcpu "$(((r1 - r0) * 1000 / hz))" \
			--argjson gcpu "$(echo "($user + $sys) * 1000" | bc)" --argjson wall "$wall" --argjson cores "$ncores" '
			def ms: . / 1e6 | (. * 100 | round) / 100 | tostring + " ms";
			def lat($p): [.latencyDistribution[]? | select(.percentage == $p) | .latency][0] // 0 | ms;
			def per1k($cpu): if .count > 0 then ($cpu * 1000 / .count * 10 | round) / 10 else "-" end;
			[$name, $c, (if $rps == "0" then "closed loop" else $rps end), (.rps | round),
			 lat(50), lat(99), ((.count - (.statusCodeDistribution.OK // 0))),
			 per1k($scpu), per1k($rcpu), per1k($gcpu),
			 (($gcpu / 1000 / $wall / $cores * 100 | round | tostring) + " %")]
			| "| " + (map(tostring) | join(" | ")) + " |"' "$work/out.json"
	done
	kill -TERM "$srv"
	wait "$srv" 2>/dev/null || true
done
