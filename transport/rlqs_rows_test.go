package transport_test

import (
	"context"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/rlqssim"
)

// TestQuotaFloodRows replays the other rows of issue 43's table on both
// servers, each beside a probe Envoy subscribing a new bucket every 250 ms
// and an RLS caller, scaled for a test (loadtest/rlqs -flood runs them at
// the size and times the probe):
//
//   - a stream sending reports of 1,000 new buckets and never reading
//     (before: RSS past 1 GB, the probe failed 7 of 11);
//   - many concurrent streams of one new bucket each (before: the others
//     starved while they ramped up);
//   - new buckets in 0.24 MB reports, read by a client with gRPC's default
//     4 MiB receive limit (before: one 4.69 MB answer lost the stream,
//     RESOURCE_EXHAUSTED).
//
// What it asserts holds on any machine: every probe is answered, no RLS
// decision fails, every bucket and stream is answered, no answer is over
// the client's limit, and each stream's state is gone once it closed.
func TestQuotaFloodRows(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the quota service")
	}
	rows := []struct {
		name string
		run  func(t *testing.T, ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient, dial func() (*grpc.ClientConn, error))
	}{
		{"never reading", func(t *testing.T, ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient, _ func() (*grpc.ClientConn, error)) {
			sent, err := rlqssim.FloodUnread(ctx, client, 1000, 300, 3*time.Second)
			if err != nil {
				t.Fatalf("after %d reports: %v", sent, err)
			}
			if sent == 0 {
				t.Fatal("no report sent")
			}
			t.Logf("%d reports of 1,000 new buckets sent, none read", sent)
		}},
		{"many streams", func(t *testing.T, ctx context.Context, _ rlqsv3.RateLimitQuotaServiceClient, dial func() (*grpc.ClientConn, error)) {
			const n = 1000
			res, err := rlqssim.FloodManyStreams(ctx, dial, n, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Failed) > 0 {
				t.Fatalf("%d streams failed, the first: %v", len(res.Failed), res.Failed[0])
			}
			if res.Answered != n {
				t.Fatalf("%d of %d streams answered", res.Answered, n)
			}
			t.Logf("%d streams answered, median %v", n, res.Took[n/2])
		}},
		{"big reports", func(t *testing.T, ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient, _ func() (*grpc.ClientConn, error)) {
			const n = 60_000
			res, err := rlqssim.FloodBig(ctx, client, n, 10_000)
			if err != nil {
				t.Fatal(err) // RESOURCE_EXHAUSTED: an answer over the client's limit
			}
			if res.Answered != n {
				t.Fatalf("%d of %d buckets answered", res.Answered, n)
			}
			t.Logf("%d buckets in reports of %d bytes answered in %d responses, the largest %d bytes", n, res.LargestReport, res.Responses, res.LargestAnswer)
		}},
	}
	for _, server := range quotaServers {
		for _, row := range rows {
			t.Run(server+"/"+row.name, func(t *testing.T) {
				h := startClock(t, map[string]string{"SLUICE_GRPC_SERVER": server,
					// A starved machine (-race, busy cores) may keep RLS
					// decisions behind the flood's reservations longer than
					// the 1 s default: slow, not wrong.
					"SLUICE_BACKEND_TIMEOUT": "2m"},
					map[string]string{"q.yaml": quotaRules}, nil)
				// A hang's bound, not a speed's.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				stopWitnesses := startWitnesses(t, ctx, h)
				dial := func() (*grpc.ClientConn, error) {
					return grpc.NewClient(h.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
				}
				row.run(t, ctx, rlqsv3.NewRateLimitQuotaServiceClient(h.GRPCConn(t)), dial)
				lat, _, rlsCalls := stopWitnesses()
				t.Logf("%s: %d probes answered, p50 %v, max %v; %d RLS decisions, none failed", server, len(lat), lat[len(lat)/2], lat[len(lat)-1], rlsCalls)
			})
		}
	}
}
