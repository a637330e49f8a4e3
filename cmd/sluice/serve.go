package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func init() {
	registerCommand("serve", "run the rate limit service and the OData API together", runServe)
}

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	rl, err := startRateLimit(ctx, os.LookupEnv)
	if err != nil {
		return err
	}
	ready := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- rl.run(ctx, ready) }()
	select {
	case err := <-errc:
		return err
	case <-ready:
	}
	printTryLines(rl)
	return <-errc
}

// printTryLines tells a person at a terminal what to do next.
func printTryLines(rl *rateLimit) {
	a := rl.srv.Addrs()
	grpcAddr := localAddr(a.GRPC.String())
	httpAddr := localAddr(a.HTTP.String())
	fmt.Printf(`
sluice is running.
  rate limit gRPC   %s   (envoy.service.ratelimit.v3.RateLimitService)
  rate limit HTTP   http://%s/json  and  /healthcheck
  debug             http://%s/  (/rlconfig, /stats, /debug/pprof/)

Try:
  curl -s http://%[2]s/json -d '{"domain":"example","descriptors":[{"entries":[{"key":"user","value":"ann"}]}]}'
  sluice client -dial_string %[1]s -domain example -descriptors user=ann
  curl -s http://%[3]s/rlconfig
(run the first line six times: the sixth answer is 429 OVER_LIMIT)
`, grpcAddr, httpAddr, localAddr(a.Debug.String()))
}

// localAddr turns a wildcard listen address into one a person can paste.
func localAddr(addr string) string {
	for _, any := range []string{"0.0.0.0:", "[::]:"} {
		if strings.HasPrefix(addr, any) {
			return "localhost:" + strings.TrimPrefix(addr, any)
		}
	}
	return addr
}
