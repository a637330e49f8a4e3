package transport_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestQuotaBucketFlood replays issue 43's flood on both servers: streams
// that each subscribe a thousand new buckets at once (bucket ids come from
// request attributes, so end users create them through Envoy), beyond
// the service's reporter cap, while a probe stream subscribes a new
// bucket every 250 ms and an RLS caller asks for decisions. Before, one
// lock over every bucket left the probe unanswered for minutes, RLS calls
// failed "waiting for rate limit counters", and the buckets gauge stayed
// at 730k after every stream closed.
//
// What it asserts holds on any machine: every probe is answered, no RLS
// decision fails, the buckets beyond the cap are refused (not tracked),
// and once the flood's streams have closed the state drains to nothing
// but the probe's. The probe's latency is logged (make bench and
// loadtest/rlqs-flood measure it), not asserted.
func TestQuotaBucketFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the quota service")
	}
	const streams, perStream, maxReporters = 40, 1000, 10_000
	for _, server := range quotaServers {
		t.Run(server, func(t *testing.T) {
			h := startClock(t, map[string]string{"SLUICE_GRPC_SERVER": server, "SLUICE_RLQS_MAX_REPORTERS": fmt.Sprint(maxReporters)},
				map[string]string{"q.yaml": quotaRules}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			conn := h.grpcConn(t)
			client := rlqsv3.NewRateLimitQuotaServiceClient(conn)

			// The probe and the RLS caller run through the flood.
			probeCtx, stopProbe := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var lat []time.Duration
			var probeErr, rlsErr error
			rlsCalls := 0
			wg.Add(2)
			go func() {
				defer wg.Done()
				// Another Envoy: its own connection.
				lat, probeErr = probe(probeCtx, rlqsv3.NewRateLimitQuotaServiceClient(h.grpcConn(t)))
			}()
			go func() {
				defer wg.Done()
				rlsCalls, rlsErr = rlsLoop(probeCtx, rlsv3.NewRateLimitServiceClient(h.grpcConn(t)))
			}()

			// The flood: every stream sends its thousand buckets and reads
			// what comes until every bucket is answered.
			var fw sync.WaitGroup
			answered := make([]int, streams)
			floodErr := make([]error, streams)
			for i := range streams {
				fw.Add(1)
				go func() {
					defer fw.Done()
					answered[i], floodErr[i] = flood(ctx, client, i, perStream)
				}()
			}
			fw.Wait()
			for i, err := range floodErr {
				if err != nil {
					t.Fatalf("flood stream %d: %v", i, err)
				}
				if answered[i] != perStream {
					t.Errorf("flood stream %d: %d of %d buckets answered (tracked or refused)", i, answered[i], perStream)
				}
			}
			refused := h.stats.Counter("ratelimit.rlqs.refused_buckets").Value()
			if want := uint64(streams*perStream - maxReporters); refused < want {
				t.Errorf("%d buckets refused, want at least %d beyond the cap of %d", refused, want, maxReporters)
			}
			if g := h.stats.Gauge("ratelimit.rlqs.reporters").Value(); g > maxReporters {
				t.Errorf("%d reporters tracked, over the cap of %d", g, maxReporters)
			}
			// Every flood stream has closed: their buckets go once what
			// they were sent has expired (ghosts), leaving the probe's.
			testenv.Eventually(t, "the flood's streams gone from the streams gauge", func() bool {
				return h.stats.Gauge("ratelimit.rlqs.streams").Value() <= 1
			})
			testenv.Eventually(t, "the flood's buckets forgotten after their TTL", func() bool {
				return h.stats.Gauge("ratelimit.rlqs.reporters").Value() <= 200
			})
			stopProbe()
			wg.Wait()
			if probeErr != nil {
				t.Fatalf("probe: %v", probeErr)
			}
			if rlsErr != nil {
				t.Fatalf("RLS decisions during the flood: %v", rlsErr)
			}
			if len(lat) == 0 || rlsCalls == 0 {
				t.Fatalf("%d probes and %d RLS calls answered during the flood", len(lat), rlsCalls)
			}
			for i, l := range lat {
				if l > 100*time.Millisecond {
					t.Logf("probe %d: %v", i, l)
				}
			}
			slices.Sort(lat)
			t.Logf("%s: %d probes answered, p50 %v, max %v; %d RLS decisions, none failed; %d buckets refused",
				server, len(lat), lat[len(lat)/2], lat[len(lat)-1], rlsCalls, refused)
		})
	}
}

// flood opens a stream, subscribes n new buckets in one report and reads
// until each is answered; it returns how many were.
func flood(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient, id, n int) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		return 0, err
	}
	rep := &rlqsv3.RateLimitQuotaUsageReports{Domain: "q"}
	for j := range n {
		rep.BucketQuotaUsages = append(rep.BucketQuotaUsages, usage(map[string]string{"user": fmt.Sprintf("f%d-%d", id, j)}, 0, 1, 0))
	}
	if err := stream.Send(rep); err != nil {
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
	return len(seen), stream.CloseSend()
}

// probe subscribes a new bucket every 250 ms on one stream and returns how
// long each took to be answered, until ctx ends.
func probe(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient) ([]time.Duration, error) {
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		return nil, err
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
			BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"user": name}, 0, 1, 0)}}); err != nil {
			return lat, err
		}
	wait:
		for {
			select {
			case got := <-answers:
				if got == name {
					lat = append(lat, time.Since(sent))
					break wait
				}
			case err := <-recvErr:
				if ctx.Err() != nil {
					return lat, nil
				}
				return lat, err
			}
		}
		select {
		case <-ctx.Done():
			return lat, nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// rlsLoop asks for RLS decisions on the quota rule's counter every 20 ms
// until ctx ends; an error is a decision that failed.
func rlsLoop(ctx context.Context, client rlsv3.RateLimitServiceClient) (int, error) {
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
