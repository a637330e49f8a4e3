package rlqssim

import (
	"context"
	"fmt"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The bucket flood of issue 43, shared by transport's TestQuotaBucketFlood
// and loadtest/rlqs -flood: streams subscribing many new buckets at once,
// a probe Envoy subscribing one now and then, and an RLS caller.

func subscribe(bucket map[string]string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: bucket},
		TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1}
}

// Flood opens a stream, subscribes n new buckets of domain q
// ({user: f<id>-<j>}) in one report and, once every one is answered,
// calls hold (when not nil) before it closes the stream and reads
// until each is answered; it returns how many were.
func Flood(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient, id, n int, hold func()) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		return 0, err
	}
	if err := stream.Send(NewBuckets(fmt.Sprintf("f%d-", id), 0, n)); err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for len(seen) < n {
		resp, err := stream.Recv()
		if err != nil {
			return len(seen), err
		}
		for _, a := range resp.GetBucketAction() {
			seen[a.GetBucketId().GetBucket()["user"]] = true
		}
	}
	if hold != nil {
		hold()
	}
	return len(seen), stream.CloseSend()
}

// Probe subscribes a new bucket of domain q every 250 ms on one stream and returns how
// long each took to be answered, until ctx ends, and how long the probe still
// unanswered then had waited (0: none was): a server that stalls shows there,
// not in the answered ones.
func Probe(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient) (answered []time.Duration, waiting time.Duration, err error) {
	return ProbeEach(ctx, client, nil)
}

// ProbeEach is Probe telling each, when not nil, when every answered probe
// was sent and how long it took (so that a slow one can be matched with
// the server's state at the time).
func ProbeEach(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient, each func(sent time.Time, took time.Duration)) (answered []time.Duration, waiting time.Duration, err error) {
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		return nil, 0, err
	}
	answers := make(chan string, 64)
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			for _, a := range resp.GetBucketAction() {
				select {
				case answers <- a.GetBucketId().GetBucket()["user"]:
				default:
				}
			}
		}
	}()
	var lat []time.Duration
	for i := 0; ; i++ {
		name := fmt.Sprint("probe-", i)
		sent := time.Now()
		if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "q",
			BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{subscribe(map[string]string{"user": name})}}); err != nil {
			if ctx.Err() != nil {
				return lat, 0, nil
			}
			return lat, 0, err
		}
	wait:
		for {
			select {
			case got := <-answers:
				if got == name {
					lat = append(lat, time.Since(sent))
					if each != nil {
						each(sent, lat[len(lat)-1])
					}
					break wait
				}
			case err := <-recvErr:
				if ctx.Err() != nil {
					return lat, time.Since(sent), nil
				}
				return lat, time.Since(sent), err
			}
		}
		select {
		case <-ctx.Done():
			return lat, 0, nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// RLSLoop asks for RLS decisions on {user: rls} of domain q every 20 ms
// until ctx ends; an error is a decision that failed.
func RLSLoop(ctx context.Context, client rlsv3.RateLimitServiceClient) (int, error) {
	req := &rlsv3.RateLimitRequest{Domain: "q", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "rls"}}}}}
	n := 0
	for {
		// Generous: a starved machine is slow, not wrong.
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := client.ShouldRateLimit(cctx, req)
		cancel()
		if ctx.Err() != nil {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
		select {
		case <-ctx.Done():
			return n, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}
