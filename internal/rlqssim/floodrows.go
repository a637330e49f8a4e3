package rlqssim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The other rows of issue 43's table, beside Flood's many streams of new
// buckets: a stream that never reads, many concurrent streams, very large
// reports. Shared by transport's TestQuotaFloodRows and loadtest/rlqs
// -flood; every loop is bounded by a count and by its context.

// NewBuckets is a report of domain q subscribing n new buckets
// {user: <prefix><k>}, k from from.
func NewBuckets(prefix string, from, n int) *rlqsv3.RateLimitQuotaUsageReports {
	rep := &rlqsv3.RateLimitQuotaUsageReports{Domain: "q"}
	for k := from; k < from+n; k++ {
		rep.BucketQuotaUsages = append(rep.BucketQuotaUsages, subscribe(map[string]string{"user": prefix + strconv.Itoa(k)}))
	}
	return rep
}

// FloodUnread opens a stream and sends reports of perReport new buckets
// one after the other for d (at most max reports), reading nothing; Send
// blocks while the server takes no more (its flow control), until d ends.
// It returns how many reports were sent.
func FloodUnread(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient, perReport, max int, d time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		return 0, err
	}
	sent := 0
	for ; sent < max && ctx.Err() == nil; sent++ {
		if err := stream.Send(NewBuckets("n", sent*perReport, perReport)); err != nil {
			if ctx.Err() != nil {
				break // d ended while the server held the stream back
			}
			return sent, err
		}
	}
	return sent, nil
}

// ManyStreams is what FloodManyStreams saw.
type ManyStreams struct {
	Answered int             // streams whose bucket was answered
	Took     []time.Duration // each answered stream's wait from the start, sorted
	Failed   []error         // what failed, a stream's first error each
}

// FloodManyStreams opens n streams at once, perConn to a connection (made
// by dial), each subscribing one new bucket, and keeps every one open
// until all are answered (or ctx ends).
func FloodManyStreams(ctx context.Context, dial func() (*grpc.ClientConn, error), n, perConn int) (ManyStreams, error) {
	var res ManyStreams
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range (n + perConn - 1) / perConn {
		c, err := dial()
		if err != nil {
			return res, err
		}
		conns = append(conns, c)
	}
	start := time.Now()
	took := make([]time.Duration, n)
	errs := make([]error, n)
	release := make(chan struct{})
	var answered, all sync.WaitGroup
	answered.Add(n)
	all.Add(n)
	for i := range n {
		client := rlqsv3.NewRateLimitQuotaServiceClient(conns[i/perConn])
		go func() {
			defer all.Done()
			done := sync.OnceFunc(answered.Done)
			defer done()
			errs[i] = func() error {
				stream, err := client.StreamRateLimitQuotas(ctx)
				if err != nil {
					return err
				}
				if err := stream.Send(NewBuckets(fmt.Sprintf("s%d-", i), 0, 1)); err != nil {
					return err
				}
				if _, err := stream.Recv(); err != nil {
					return err
				}
				took[i] = time.Since(start)
				done()
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
	for i, err := range errs {
		switch {
		case err != nil:
			res.Failed = append(res.Failed, fmt.Errorf("stream %d: %w", i, err))
		case took[i] > 0:
			res.Answered++
			res.Took = append(res.Took, took[i])
		}
	}
	slices.Sort(res.Took)
	return res, nil
}

// Big is what FloodBig saw.
type Big struct {
	Answered      int // buckets answered
	Responses     int
	LargestReport int // bytes
	LargestAnswer int // bytes
}

// FloodBig subscribes n new buckets on one stream in reports of perReport,
// and reads the answers until every bucket is answered, as a default gRPC
// client does (4 MiB at most a message: an answer over it ends the
// stream RESOURCE_EXHAUSTED, returned as the error).
func FloodBig(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient, n, perReport int) (Big, error) {
	var res Big
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		return res, err
	}
	sendErr := make(chan error, 1)
	largest := 0
	go func() {
		for from := 0; from < n; from += perReport {
			rep := NewBuckets("b", from, min(perReport, n-from))
			largest = max(largest, proto.Size(rep))
			if err := stream.Send(rep); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	seen := make(map[string]bool, n)
	var recvErr error
	for len(seen) < n {
		resp, err := stream.Recv()
		if err != nil {
			recvErr = fmt.Errorf("after %d of %d buckets answered: %w", len(seen), n, err)
			break
		}
		res.Responses++
		res.LargestAnswer = max(res.LargestAnswer, proto.Size(resp))
		for _, a := range resp.GetBucketAction() {
			seen[a.GetBucketId().GetBucket()["user"]] = true
		}
	}
	res.Answered = len(seen)
	cancel()
	err = <-sendErr
	res.LargestReport = largest
	if recvErr != nil {
		return res, recvErr
	}
	if err != nil && !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
		return res, fmt.Errorf("sending: %w", err)
	}
	return res, nil
}
