package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/rlqssim"
)

// The flood's probe Envoy and RLS caller run, by default, in a process of
// their own (this command again, with -probe-target). In the flooding
// process a probe's answer waits for a P behind the goroutines of a
// thousand flood streams, so its latency measured the load client's
// scheduler as much as the server; its own process is scheduled by the
// kernel beside the others, as a real Envoy is. -probe-process=false
// keeps them in the flooding process, to compare.

// probeResult is what the probe and the RLS caller saw, from when they
// started until they were told to stop.
type probeResult struct {
	Sent     []time.Time     `json:"sent"`
	Took     []time.Duration `json:"took"`
	Waiting  time.Duration   `json:"waiting"` // the probe unanswered when probing stopped
	ProbeErr string          `json:"probe_err,omitempty"`
	RLSCalls int             `json:"rls_calls"`
	RLSErr   string          `json:"rls_err,omitempty"`
}

// runProbe probes target (a probe every 250 ms and an RLS decision every
// 20 ms, each on its own connection) until ctx ends.
func runProbe(ctx context.Context, target string) (probeResult, error) {
	var r probeResult
	pc, err := dial(target)
	if err != nil {
		return r, err
	}
	defer pc.Close()
	rc, err := dial(target)
	if err != nil {
		return r, err
	}
	defer rc.Close()
	var mu sync.Mutex
	each := func(sent time.Time, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		r.Sent = append(r.Sent, sent)
		r.Took = append(r.Took, took)
	}
	var wg sync.WaitGroup
	var probeErr, rlsErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, r.Waiting, probeErr = rlqssim.ProbeEach(ctx, rlqsv3.NewRateLimitQuotaServiceClient(pc), each)
	}()
	go func() {
		defer wg.Done()
		r.RLSCalls, rlsErr = rlqssim.RLSLoop(ctx, rlsv3.NewRateLimitServiceClient(rc))
	}()
	wg.Wait()
	r.ProbeErr, r.RLSErr = errText(probeErr), errText(rlsErr)
	return r, nil
}

// dial is a plaintext gRPC connection to target, as Envoy's to sluice.
func dial(target string) (*grpc.ClientConn, error) {
	return grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// probeChild is the probe process's side: it probes target until its
// standard input ends (the flooding process closed it, or died) or it is
// interrupted, then writes its probeResult to standard output.
func probeChild(ctx context.Context, target string) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	r, err := runProbe(ctx, target)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// startProbe starts probing target, in a child process when own is true
// (on pin's server CPUs when pinned), and returns what ends the probing
// and hands back what it saw; calling it again returns the same.
func startProbe(ctx context.Context, target string, own bool, pin pinning) (func() (probeResult, error), error) {
	if !own {
		ctx, cancel := context.WithCancel(ctx)
		var r probeResult
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			r, err = runProbe(ctx, target)
		}()
		return sync.OnceValues(func() (probeResult, error) {
			cancel()
			<-done
			return r, err
		}), nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("probe process: %w", err)
	}
	cmd := pin.command(self, "-probe-target", target)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("probe process: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("probe process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("probe process: %w", err)
	}
	return sync.OnceValues(func() (probeResult, error) {
		_ = in.Close()
		var r probeResult
		derr := json.NewDecoder(out).Decode(&r)
		werr := cmd.Wait()
		if derr != nil {
			return r, fmt.Errorf("probe process: reading its result: %w", errors.Join(derr, werr))
		}
		if werr != nil {
			return r, fmt.Errorf("probe process: %w", werr)
		}
		return r, nil
	}), nil
}

// saveProbes writes, when o.profile is set, one line per answered probe to
// <profile>-<server>-probes.txt: when it was sent (the wall clock, and
// since the flood started) and how long it took, so that a slow probe can
// be matched with the goroutine dumps taken at the time. A failure to
// write is told on stderr: the flood's verdict does not depend on it.
func saveProbes(o options, r probeResult, start time.Time) {
	if o.profile == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintln(&b, "# sent (UTC)\tsince flood start\ttook")
	for i, at := range r.Sent {
		fmt.Fprintf(&b, "%s\t%v\t%v\n", at.UTC().Format("15:04:05.000"), at.Sub(start).Round(time.Millisecond), r.Took[i].Round(time.Millisecond))
	}
	if err := os.WriteFile(o.profile+"-"+o.server+"-probes.txt", []byte(b.String()), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "probes: %v\n", err)
	}
}
