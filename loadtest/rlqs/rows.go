package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The rows of issue 43's table, each a flood beside the probe Envoy and
// the RLS caller (flood.go). Every loop is bounded by a count and by
// rowTimeout.

// rowTimeout bounds a row's flood: a server that stops answering fails
// the row rather than holding the run.
const rowTimeout = 5 * time.Minute

// floodRow is one way to flood the quota service. run floods target and
// returns what it did, for the summary line ("1000 streams × 1000 new
// buckets answered"), and what broke.
type floodRow struct {
	name string
	run  func(ctx context.Context, target string) (did string, broken []string, err error)
}

// parseFlood reads -flood: STREAMSxBUCKETS (streams of new buckets at
// once, each on its own connection), unread (one stream sending a report
// of 1,000 new buckets after another and never reading), streams:N (N
// concurrent streams of one new bucket each, 100 to a connection) or
// big:N (N new buckets on one stream in reports of about 0.3 MB, read by
// a client with gRPC's default 4 MiB receive limit).
func parseFlood(s string) (floodRow, error) {
	kind, arg, _ := strings.Cut(s, ":")
	num := func(what string) (int, error) {
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("-flood %q: %s wants a positive count after the colon", s, what)
		}
		return n, nil
	}
	switch kind {
	case "unread":
		if arg != "" {
			return floodRow{}, fmt.Errorf("-flood %q: unread takes no count", s)
		}
		return floodRow{name: s, run: func(ctx context.Context, target string) (string, []string, error) {
			return floodUnread(ctx, target, 1000, 15*time.Second)
		}}, nil
	case "streams":
		n, err := num("streams")
		return floodRow{name: s, run: func(ctx context.Context, target string) (string, []string, error) {
			return floodManyStreams(ctx, target, n, 100)
		}}, err
	case "big":
		n, err := num("big")
		return floodRow{name: s, run: func(ctx context.Context, target string) (string, []string, error) {
			return floodBig(ctx, target, n, 10_000)
		}}, err
	}
	var streams, buckets int
	if _, err := fmt.Sscanf(s, "%dx%d", &streams, &buckets); err != nil || streams < 1 || buckets < 1 {
		return floodRow{}, fmt.Errorf("-flood %q: want STREAMSxBUCKETS (both positive, e.g. 1000x1000), unread, streams:N or big:N", s)
	}
	return floodRow{name: s, run: func(ctx context.Context, target string) (string, []string, error) {
		broken, err := floodStreams(ctx, target, streams, buckets)
		return fmt.Sprintf("%d streams × %d new buckets answered", streams, buckets), broken, err
	}}, nil
}

// newBuckets is a report subscribing n new buckets {user: <prefix><k>}.
func newBuckets(prefix string, from, n int) *rlqsv3.RateLimitQuotaUsageReports {
	rep := &rlqsv3.RateLimitQuotaUsageReports{Domain: "q"}
	for k := from; k < from+n; k++ {
		rep.BucketQuotaUsages = append(rep.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:    &rlqsv3.BucketId{Bucket: map[string]string{"user": prefix + strconv.Itoa(k)}},
			TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1})
	}
	return rep
}

// floodUnread is the row "one stream, 1,000 new buckets per report, never
// reading": it sends report after report for d (or until the server stops
// taking them: its flow control), and reads nothing.
func floodUnread(ctx context.Context, target string, perReport int, d time.Duration) (string, []string, error) {
	c, err := dial(target)
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(c).StreamRateLimitQuotas(ctx)
	if err != nil {
		return "", nil, err
	}
	sent := 0
	for ctx.Err() == nil && sent < 100_000 { // a count bound besides the time
		// Send blocks while the server takes no more: the stream's
		// context ending unblocks it.
		if err := stream.Send(newBuckets("n", sent*perReport, perReport)); err != nil {
			break
		}
		sent++
	}
	return fmt.Sprintf("one stream never reading sent %d reports of %d new buckets in %v", sent, perReport, d), nil, nil
}

// floodManyStreams is the row "10,000 concurrent streams": n streams,
// perConn to a connection, each subscribing one new bucket; every stream
// stays open until every one is answered.
func floodManyStreams(ctx context.Context, target string, n, perConn int) (string, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, rowTimeout)
	defer cancel()
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	took := make([]time.Duration, n)
	errs := make([]error, n)
	var answered, all sync.WaitGroup
	answered.Add(n)
	all.Add(n)
	release := make(chan struct{})
	for i := range n {
		if i%perConn == 0 {
			c, err := dial(target)
			if err != nil {
				close(release)
				return "", nil, err
			}
			conns = append(conns, c)
		}
		client := rlqsv3.NewRateLimitQuotaServiceClient(conns[len(conns)-1])
		go func() {
			defer all.Done()
			once := sync.OnceFunc(answered.Done)
			defer once()
			errs[i] = func() error {
				stream, err := client.StreamRateLimitQuotas(ctx)
				if err != nil {
					return err
				}
				if err := stream.Send(newBuckets(fmt.Sprintf("s%d-", i), 0, 1)); err != nil {
					return err
				}
				if _, err := stream.Recv(); err != nil {
					return err
				}
				took[i] = time.Since(start)
				once()
				select {
				case <-release:
				case <-ctx.Done():
				}
				return stream.CloseSend()
			}()
		}()
	}
	answered.Wait()
	close(release)
	all.Wait()
	var broken []string
	failed := 0
	for i, err := range errs {
		if err != nil {
			if failed++; failed <= 3 {
				broken = append(broken, fmt.Sprintf("stream %d: %v", i, err))
			}
		}
	}
	if failed > 3 {
		broken = append(broken, fmt.Sprintf("and %d streams more", failed-3))
	}
	ok := slices.DeleteFunc(slices.Clone(took), func(d time.Duration) bool { return d == 0 })
	slices.Sort(ok)
	median := time.Duration(0)
	if len(ok) > 0 {
		median = testenv.Percentile(ok, 0.5)
	}
	return fmt.Sprintf("%d of %d concurrent streams (%d a connection) answered, median %v", len(ok), n, perConn, median.Round(time.Millisecond)), broken, nil
}

// floodBig is the row "100k buckets in 0.3 MB reports": one stream sends
// n new buckets in reports of perReport, and reads the answers as a
// default gRPC client does (4 MiB at most a message): an answer over it
// loses the stream (RESOURCE_EXHAUSTED).
func floodBig(ctx context.Context, target string, n, perReport int) (string, []string, error) {
	c, err := dial(target)
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, rowTimeout)
	defer cancel()
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(c).StreamRateLimitQuotas(ctx)
	if err != nil {
		return "", nil, err
	}
	largestReport := 0
	sendErr := make(chan error, 1)
	go func() {
		for from := 0; from < n; from += perReport {
			rep := newBuckets("b", from, min(perReport, n-from))
			largestReport = max(largestReport, proto.Size(rep))
			if err := stream.Send(rep); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	seen := make(map[string]bool, n)
	responses, largest := 0, 0
	var broken []string
	for len(seen) < n {
		resp, err := stream.Recv()
		if err != nil {
			if status.Code(err) == codes.ResourceExhausted {
				broken = append(broken, fmt.Sprintf("an answer over the client's limit lost the stream: %v", err))
			} else {
				broken = append(broken, fmt.Sprintf("after %d of %d buckets answered: %v", len(seen), n, err))
			}
			break
		}
		responses++
		largest = max(largest, proto.Size(resp))
		for _, a := range resp.GetBucketAction() {
			seen[a.GetBucketId().GetBucket()["user"]] = true
		}
	}
	cancel()
	if err := <-sendErr; err != nil && !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled && len(broken) == 0 {
		broken = append(broken, fmt.Sprintf("sending: %v", err))
	}
	return fmt.Sprintf("%d of %d new buckets in reports of %.2f MB answered in %d responses, the largest %.2f MB",
		len(seen), n, float64(largestReport)/1e6, responses, float64(largest)/1e6), broken, nil
}
