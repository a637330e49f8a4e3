package transport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/transport/h2grpc"
)

// quotaServer serves the Rate Limit Quota Service's one method,
// StreamRateLimitQuotas, on either gRPC server: a stream is a loop that
// hands reports to the quota service and writes the actions it pushes.
type quotaServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	svc *quota.Service
	log *slog.Logger

	// drain ends every stream (UNAVAILABLE), so that the Envoys reconnect
	// to another replica and a graceful stop need not wait for them.
	drain     chan struct{}
	drainOnce sync.Once
	// maxMsg bounds an answer's size.
	maxMsg int
}

func newQuotaServer(svc *quota.Service, log *slog.Logger) *quotaServer {
	return &quotaServer{svc: svc, log: log, drain: make(chan struct{}), maxMsg: maxAnswerBytes}
}

// maxAnswerBytes bounds one RateLimitQuotaResponse: gRPC clients refuse
// messages over 4 MiB by default (RESOURCE_EXHAUSTED, and the stream is
// lost), so larger answers go as several.
const maxAnswerBytes = 4<<20 - 64<<10

// stopStreams ends the streams being served and those opened later.
func (q *quotaServer) stopStreams() { q.drainOnce.Do(func() { close(q.drain) }) }

// native is the method on the native server, whose messages are bytes:
// decoded and encoded by hand (rlqswire.go).
func (q *quotaServer) native(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
	var dec reportsDecoder
	return q.serve(ctx, func() (report, error) {
		b, err := recv()
		if err != nil {
			return report{}, err
		}
		domain, usages, err := dec.decode(b)
		if err != nil {
			return report{}, status.Errorf(codes.InvalidArgument, "usage reports: %v", err)
		}
		return report{domain, usages}, nil
	}, func(acts []quota.Action) error {
		n := 0
		for i := range acts {
			n += actionFrameSize(&acts[i])
		}
		b := make([]byte, 0, n)
		for i := range acts {
			b = appendAction(b, &acts[i])
		}
		return send(b)
	})
}

// StreamRateLimitQuotas is the method on grpc-go's server. A message its
// codec cannot read is INVALID_ARGUMENT, as on the native server (grpc-go
// says INTERNAL).
func (q *quotaServer) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	return q.serve(stream.Context(), func() (report, error) {
		m, err := stream.Recv()
		if s, ok := status.FromError(err); ok && s.Code() == codes.Internal && strings.Contains(s.Message(), "unmarshal") {
			return report{}, status.Errorf(codes.InvalidArgument, "usage reports: %s", s.Message())
		}
		if err != nil {
			return report{}, err
		}
		return reportOf(m), nil
	}, func(acts []quota.Action) error {
		resp := &rlqsv3.RateLimitQuotaResponse{BucketAction: make([]*rlqsv3.RateLimitQuotaResponse_BucketAction, len(acts))}
		for i, a := range acts {
			resp.BucketAction[i] = bucketAction(a)
		}
		return stream.Send(resp)
	})
}

// report is one RateLimitQuotaUsageReports as the quota service takes it.
type report struct {
	domain string
	usages []quota.Usage
}

// reportOf reads a decoded message.
func reportOf(m *rlqsv3.RateLimitQuotaUsageReports) report {
	usages := make([]quota.Usage, len(m.GetBucketQuotaUsages()))
	for i, u := range m.GetBucketQuotaUsages() {
		usages[i] = quota.Usage{Elapsed: u.GetTimeElapsed().AsDuration(),
			Allowed: u.GetNumRequestsAllowed(), Denied: u.GetNumRequestsDenied()}
		if b := u.GetBucketId().GetBucket(); len(b) > 0 {
			usages[i].Bucket = alloc.BucketOf(b)
		}
	}
	return report{m.GetDomain(), usages}
}

type received struct {
	r   report
	err error
}

// serve runs one stream until the client ends it, it fails, or drain. The
// receiving goroutine belongs to the call: it ends when recv fails, which
// it does once the call is over (both servers end a call's receives when
// its method returns).
func (q *quotaServer) serve(ctx context.Context, recv func() (report, error), send func([]quota.Action) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	box := newOutbox(q.maxMsg)
	st := q.svc.Open(box)
	defer st.Close()
	// With the native server, a flush that replaced buckets is followed
	// by a PING: its answer tells the service the Envoy has them.
	acker, canAck := h2grpc.AckerOf(ctx)
	var (
		ackCh             <-chan bool
		ackUpTo, nextUpTo time.Time
	)
	ask := func(upTo time.Time) {
		if !canAck || upTo.IsZero() {
			return
		}
		if ackCh != nil {
			nextUpTo = maxTime(nextUpTo, upTo)
			return
		}
		ackUpTo, ackCh = upTo, acker()
	}
	in := make(chan received)
	go func() {
		for {
			r, err := recv()
			select {
			case in <- received{r, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-q.drain:
			return status.Error(codes.Unavailable, "sluice is shutting down: reconnect")
		case <-ctx.Done():
			if c := context.Cause(ctx); status.Code(c) != codes.Unknown {
				return c // the server's reason: draining, a reset
			}
			return status.FromContextError(ctx.Err()).Err()
		case <-box.ready:
			replaced, err := box.flush(send)
			if err != nil {
				return err
			}
			ask(replaced)
		case ok := <-ackCh:
			ackCh = nil
			if ok {
				st.Acked(ackUpTo, time.Now())
			}
			if !nextUpTo.IsZero() {
				upTo := nextUpTo
				nextUpTo = time.Time{}
				ask(upTo)
			}
		case r := <-in:
			if errors.Is(r.err, io.EOF) {
				_, err := box.flush(send)
				return err
			}
			if r.err != nil {
				return r.err
			}
			if err := q.report(st, r.r); err != nil {
				return err
			}
		}
	}
}

// report hands one message to the quota service.
func (q *quotaServer) report(st *quota.Stream, r report) error {
	err := st.Report(time.Now(), r.domain, r.usages)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, quota.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

// outbox is a stream's Sink: actions queue until the stream's loop writes
// them, in messages of at most max bytes; a newer action for a bucket
// replaces a queued one, so a stream that writes slowly holds one per
// bucket at most.
type outbox struct {
	max   int
	mu    sync.Mutex
	queue []quota.Action
	at    map[string]int
	ready chan struct{}
}

func newOutbox(max int) *outbox {
	return &outbox{max: max, at: make(map[string]int), ready: make(chan struct{}, 1)}
}

// Push queues actions; it never blocks.
func (o *outbox) Push(acts []quota.Action) {
	o.mu.Lock()
	for _, a := range acts {
		if i, ok := o.at[a.Key]; ok {
			if o.queue[i].Replace {
				a.Replace = true // what it replaced still is
			}
			o.queue[i] = a
			continue
		}
		o.at[a.Key] = len(o.queue)
		o.queue = append(o.queue, a)
	}
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// flush writes what is queued, as few RateLimitQuotaResponses as fit
// under the size bound (send writes one), and returns when the newest
// replacement among them was decided (zero: none).
func (o *outbox) flush(send func([]quota.Action) error) (replaced time.Time, err error) {
	o.mu.Lock()
	acts := o.queue
	o.queue = nil
	clear(o.at)
	o.mu.Unlock()
	for _, a := range acts {
		if a.Replace && a.At.After(replaced) {
			replaced = a.At
		}
	}
	for len(acts) > 0 {
		size := 0
		n := 0
		for n < len(acts) {
			s := actionFrameSize(&acts[n])
			if n > 0 && size+s > o.max {
				break
			}
			size += s
			n++
		}
		if err := send(acts[:n]); err != nil {
			return time.Time{}, err
		}
		acts = acts[n:]
	}
	return replaced, nil
}

func bucketAction(a quota.Action) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	ba := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: a.Bucket.Map()}}
	if a.Abandon {
		ba.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}
		return ba
	}
	ba.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(a.TTL),
			RateLimitStrategy:    strategyProto(a.Strategy),
		}}
	return ba
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func strategyProto(s alloc.Strategy) *typev3.RateLimitStrategy {
	switch s.Kind {
	case alloc.TokenBucket:
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     s.MaxTokens,
			TokensPerFill: wrapperspb.UInt32(s.TokensPerFill),
			FillInterval:  durationpb.New(s.FillInterval),
		}}}
	case alloc.DenyAll:
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}}
}
