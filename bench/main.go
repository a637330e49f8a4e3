package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/testenv"
)

type flags struct {
	quick     bool
	sluice    string
	out       string
	peerAddr  string
	peerCmd   string
	peerEnv   string
	duration  time.Duration
	noopServe string
	noopDebug string
	readme    string
	odata     bool
	main      bool
	scaleOut  bool
	lease     bool
	rlqs      bool
	// rlqsProfile: save the server's CPU profile of each RLQS run to
	// <rlqsProfile>-<server>.pprof.
	rlqsProfile string
	compare     string
	only        string
	rounds      int
	driver      string
	load        string
}

func main() {
	var f flags
	flag.BoolVar(&f.quick, "quick", false, "short runs and fewer scenarios (make bench)")
	flag.StringVar(&f.sluice, "sluice", "bin/sluice", "the sluice binary to measure")
	flag.StringVar(&f.out, "out", "bench/results/latest.md", "where to write the markdown table")
	flag.StringVar(&f.peerAddr, "peer-addr", "", "gRPC address of another rate limit service to compare (already running, rules for domain \"bench\" loaded)")
	flag.StringVar(&f.peerCmd, "peer-cmd", "", "command that starts another rate limit service; it gets REDIS_URL, GRPC_PORT and the rules via RUNTIME_* in its environment")
	flag.StringVar(&f.peerEnv, "peer-env", "", "extra environment for -peer-cmd, k=v,k2=v2")
	flag.DurationVar(&f.duration, "duration", 0, "measured time per run (default 2s quick, 10s full)")
	flag.BoolVar(&f.main, "main", true, "measure the main table: the engine alone and every workload on every system (-main=false: only the sections asked for)")
	flag.BoolVar(&f.odata, "odata", true, "also measure the OData API on PostgreSQL")
	flag.BoolVar(&f.scaleOut, "scale-out", true, "also measure replicas sharing one Redis and a Redis Cluster, and their exactness")
	flag.BoolVar(&f.lease, "lease", true, "also measure quota leases with the store 1 ms and 10 ms away (a latency proxy in front of Redis), beside exact counting, the memory backend and any -peer-cmd")
	flag.StringVar(&f.rlqsProfile, "rlqs-profile", "", "save the server's CPU profile of each RLQS run (subscription included) to <this>-<grpc server>.pprof")
	flag.BoolVar(&f.rlqs, "rlqs", true, "also measure the Rate Limit Quota Service: 50 Envoys × 1,000 buckets reporting every 5 s (Envoy's global client)")
	flag.StringVar(&f.compare, "compare", "", "a second sluice binary measured in the same run (A/B), rows labelled sluice@<file name>")
	flag.IntVar(&f.rounds, "rounds", 0, "measure every workload on every system this many times, interleaved, and report the medians (default 3 quick, 2 full)")
	flag.StringVar(&f.only, "only", "", "measure only the workloads whose name contains this text (e.g. \"10 callers\"), and skip the in-process engine run")
	flag.StringVar(&f.readme, "readme", "", "only put the -out results into the benchmark section of this Markdown file (make bench-readme: docs/benchmarks.md)")
	flag.StringVar(&f.driver, "driver", "h2", "load driver: h2 (one event loop per connection, as a proxy's worker thread calls) or grpc (grpc-go's client, a goroutine per caller)")
	flag.StringVar(&f.load, "load", "", "only drive the rate limit service already running at this gRPC address (rules for domain \"bench\" loaded) with the -only workloads, one -duration each, and print one JSON line per workload")
	flag.StringVar(&f.noopServe, "noop-serve", "", "internal: serve a no-op RLS on this address")
	flag.StringVar(&f.noopDebug, "noop-debug", "", "internal: serve the no-op's memory statistics (/stats) on this address")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("bench: ")

	if f.readme != "" {
		if err := spliceReadme(f.readme, f.out); err != nil {
			log.Fatal(err)
		}
		return
	}
	if f.noopServe != "" {
		if err := serveNoop(f.noopServe, f.noopDebug); err != nil {
			log.Fatal(err)
		}
		return
	}
	if f.duration == 0 {
		f.duration = 10 * time.Second
		if f.quick {
			f.duration = 2 * time.Second
		}
	}
	if f.load != "" {
		if err := loadOnly(f); err != nil {
			log.Fatal(err)
		}
		return
	}
	if f.rounds == 0 {
		f.rounds = 2
		if f.quick {
			f.rounds = 3
		}
	}
	if f.rounds < 1 {
		log.Fatalf("-rounds %d: want at least 1", f.rounds)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f); err != nil {
		log.Fatal(err)
	}
}

// noopServer answers OK without work: the cost of gRPC itself.
type noopServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

var okResponse = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}

func (noopServer) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return okResponse, nil
}

func serveNoop(addr, debugAddr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if debugAddr != "" {
		// The same line sluice's debug port serves, so measure reads both alike.
		mux := http.NewServeMux()
		mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b, _ := json.Marshal(struct{ Mallocs uint64 }{ms.Mallocs})
			fmt.Fprintf(w, "memstats: %s\n", b)
		})
		dl, err := net.Listen("tcp", debugAddr)
		if err != nil {
			return err
		}
		go http.Serve(dl, mux) // ends with the process
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, noopServer{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); g.Stop() }()
	return g.Serve(ln)
}

// freePort is one loopback port that was free a moment ago.
func freePort() (int, error) {
	ps, err := testenv.FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// process is one system under test: a process this program started, or
// (p nil) a peer already running elsewhere.
type process struct {
	name  string
	addr  string // gRPC
	debug string // sluice's debug port, "" otherwise
	p     *testenv.Process
}

func (p *process) pid() int {
	if p.p == nil {
		return 0
	}
	return p.p.PID()
}

func (p *process) stop() {
	if p.p != nil {
		_ = p.p.Stop(15 * time.Second)
	}
}

// startProcess runs argv with env added to this program's, logging to dir,
// and waits until addr accepts.
func startProcess(name string, argv []string, env []string, addr, dir string) (*process, error) {
	sp, err := testenv.StartProcess(testenv.ProcessSpec{Name: name, Bin: argv[0], Args: argv[1:],
		Env: append(os.Environ(), env...), LogPath: filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".log")})
	if err != nil {
		return nil, err
	}
	if err := sp.WaitReady(context.Background(), 30*time.Second, testenv.DialCheck(addr)); err != nil {
		sp.Kill()
		return nil, fmt.Errorf("%w; log:\n%s", err, sp.LogTail(20))
	}
	return &process{name: name, addr: addr, p: sp}, nil
}

// loadOnly drives a running service: the bench's drivers on any server, to
// look at one system under load (profiles, traces) without the whole run.
func loadOnly(f flags) error {
	ws, driveFn, err := plan(f)
	if err != nil {
		return err
	}
	for _, w := range ws {
		res, err := driveFn([]string{f.load}, w, 500*time.Millisecond, f.duration)
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		b, _ := json.Marshal(map[string]any{
			"workload": w.String(), "driver": f.driver, "decisions_per_s": math.Round(res.rate()),
			"errors": res.Errors, "first_error": res.FirstErr,
			"p50_us": res.P50.Microseconds(), "p99_us": res.P99.Microseconds(), "driver_cpu_ms_per_1k": math.Round(res.DriverMs*10) / 10,
		})
		fmt.Println(string(b))
	}
	return nil
}
