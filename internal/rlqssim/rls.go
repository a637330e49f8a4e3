package rlqssim

import (
	"context"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/engine"
)

// RunRLS asks the RLS server at addr (plaintext) for decisions on one
// descriptor of domain, rate times a second, evenly, until ctx ends;
// admitted is called with the time of each decision that was OK. It is
// the RLS callers that share a rule with the quota service's Envoys.
func RunRLS(ctx context.Context, addr, domain string, entries []engine.Entry, rate float64, admitted func(at time.Time)) {
	if rate <= 0 {
		return
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range entries {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := client.ShouldRateLimit(cctx, req)
		cancel()
		if err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			admitted(time.Now())
		}
	}
}
