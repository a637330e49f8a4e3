package main

import (
	"fmt"
	"strings"
	"time"
)

func render(rows []row, eng *engineResult, took time.Duration, driver string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Rate limit benchmark\n\n")
	if len(rows) == 0 {
		fmt.Fprintf(&b, "Machine: %s · commit %s · %s · whole run %s · the main table not measured (-main=false)\n",
			machine(), gitCommit(), time.Now().UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second))
		return b.String()
	}
	fmt.Fprintf(&b, "Machine: %s · commit %s · %s · %s per run · whole run %s\n\n",
		machine(), gitCommit(), time.Now().UTC().Format("2006-01-02 15:04 UTC"), fmtDur(rows[0].res.Elapsed), took.Round(time.Second))
	fmt.Fprintf(&b, "Each row is the median (by decisions/s) of %d runs; the systems took turns on each workload, the no-op first and the others in a rotating order, and × no-op divides by the no-op's median.\n\n", rows[0].rounds)
	if eng != nil {
		fmt.Fprintf(&b, "Engine alone (in process, memory backend, %d callers, 1,000 keys): **%s decisions/s**, %.1f allocations per decision.\n\n",
			eng.callers, fmtRate(float64(eng.decisions)/eng.elapsed.Seconds()), eng.allocs)
	}
	b.WriteString("| system | backend | workload | decisions/s | × no-op | p50 | p99 | p99.9 | errors | server CPU ms/1k | Redis CPU ms/1k | server allocs/decision | Redis cmds/decision | Redis round trips/decision | driver CPU ms/1k |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		ratio := "1.00"
		if r.baseline > 0 {
			ratio = fmt.Sprintf("%.2f", r.res.rate()/r.baseline)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n",
			r.system, r.backend, r.w, fmtRate(r.res.rate()), ratio,
			fmtDur(r.res.P50), fmtDur(r.res.P99), fmtDur(r.res.P999), r.res.Errors,
			num(r.cpuMs, 1), num(r.redisMs, 1), num(r.allocs, 1), num(r.cmds, 3), num(r.trips, 3), num(r.res.DriverMs, 1))
	}
	for _, r := range rows {
		if r.note != "" {
			fmt.Fprintf(&b, "\n- %s/%s %s: %s", r.system, r.backend, r.w, r.note)
		}
	}
	b.WriteString("\n\nHow to read it: decisions/s is ShouldRateLimit calls answered per second by a closed loop of callers over 4 gRPC connections, " + driverText[driver] + "; " +
		"× no-op divides it by a grpc-go server that answers OK without any work at the same workload, the ceiling of a grpc-go server on this machine (sluice's own gRPC server costs less per call, so sluice can pass 1.0). " +
		"Latency percentiles are by nearest rank (internal/testenv.Percentile, the same definition the load-test scenarios report). " +
		"CPU is what the server (and Redis) processes used per 1,000 decisions, from /proc. Round trips are the pipelines Redis read (INFO total_reads_processed): " +
		"below 1 means the shards batched many decisions into one call. Driver CPU is what the load driver itself (this program) spent per 1,000 calls: " +
		"it shares the machine with the server, so the lighter it is the more the figures are the server's.\n")
	return b.String()
}

// driverText says how each -driver calls.
var driverText = map[string]string{
	"h2": "driven the way a proxy's worker thread calls (-driver h2): one event loop per connection keeps its callers' calls in flight as HTTP/2 streams, " +
		"writes the calls that are ready together and reads the answers as they come, with no goroutine woken per call",
	"grpc": "driven by grpc-go's client (-driver grpc): a goroutine per caller, and the client's reader and writer goroutines per connection",
}

func fmtRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(10 * time.Millisecond).String()
}

func num(v float64, prec int) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}
