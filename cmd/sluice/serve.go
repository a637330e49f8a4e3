package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/sluicehq/sluice/odata"
)

// runServe starts both halves in one process: the rate limit service
// (configured by the environment, as the reference) and the OData API
// (configured by flags; an empty embedded store is filled with demo data).
// Either one failing stops both.
func runServe(args []string) error {
	oc, err := parseODataFlags("serve", args)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	oc.opts.Metrics = odata.NewMetrics()
	plan, err := planRateLimit(os.LookupEnv)
	if err != nil {
		return err
	}
	oc.joinRateLimit(plan)
	// The OData API starts first: the rate limit service may wait for its
	// backend (as the reference), and the API does not need it.
	od, err := startOData(ctx, oc, plan.log)
	if err != nil {
		return fmt.Errorf("odata: %w", err)
	}
	odErr := make(chan error, 1)
	go func() {
		err := od.run(ctx, oc.drain, plan.log, func() { od.printTryLines(os.Stdout, oc.opts.Root, oc.db) })
		stop() // either one ending stops both, also while the other waits for its backend
		odErr <- err
	}()
	rl, err := plan.start(ctx, oc.opts.Metrics)
	if err != nil {
		stop()
		<-odErr
		return err
	}
	ready := make(chan struct{})
	rlErr := make(chan error, 1)
	go func() { rlErr <- rl.run(ctx, ready) }()
	select {
	case err := <-rlErr:
		stop()
		<-odErr
		return err
	case err := <-odErr:
		stop()
		<-rlErr
		return err
	case <-ready:
	}
	printTryLines(rl)
	fmt.Println("\nCtrl-C stops both.")
	select {
	case err = <-rlErr:
		stop()
		if oerr := <-odErr; err == nil {
			err = oerr
		}
	case err = <-odErr:
		stop()
		if rerr := <-rlErr; err == nil {
			err = rerr
		}
	}
	return err
}

// joinRateLimit makes the OData API share the rate limit service's
// operations settings: its metrics go to the pull metrics port when that is
// on (one scrape has both; the OData port then serves none), and its spans
// follow TRACING_*.
func (c *odataConfig) joinRateLimit(p *rateLimitPlan) {
	if p.pulled {
		c.metricsPath = ""
	}
	c.tracing = p.settings.Tracing
}

// printTryLines tells a person at a terminal what to do next.
func printTryLines(rl *rateLimit) {
	a := rl.srv.Addrs()
	grpcAddr := localAddr(a.GRPC.String())
	httpAddr := localAddr(a.HTTP.String())
	fmt.Printf(`
sluice is running.
  rate limit gRPC   %s   (envoy.service.ratelimit.v3.RateLimitService,
                    and the quota service of Envoy's rate_limit_quota filter: docs/rlqs.md)
  rate limit HTTP   http://%s/json  and  /healthcheck
  debug             http://%s/  (/rlconfig, /stats, /debug/pprof/)

Try:
  curl -s http://%[2]s/json -d '{"domain":"example","descriptors":[{"entries":[{"key":"user","value":"ann"}]}]}'
  %[4]s client -dial_string %[1]s -domain example -descriptors user=ann
  curl -s http://%[3]s/rlconfig
(run the first line six times: the sixth answer is 429 OVER_LIMIT)
`, grpcAddr, httpAddr, localAddr(a.Debug.String()), selfCommand(os.Args[0]))
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
