package transport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/transport/h2grpc"
)

// quotaServer serves the Rate Limit Quota Service's one method,
// StreamRateLimitQuotas, on either gRPC server: a stream is a loop that
// hands reports to the quota service and writes the actions it pushes.
type quotaServer struct {
	svc *quota.Service
	log *slog.Logger

	// drain ends every stream (UNAVAILABLE), so that the Envoys reconnect
	// to another replica and a graceful stop need not wait for them.
	drain     chan struct{}
	drainOnce sync.Once
	// maxMsg bounds an answer's size.
	maxMsg int
	// heavy are the tokens a large message is decoded or encoded with:
	// GOMAXPROCS of them.
	heavy chan struct{}
}

func newQuotaServer(svc *quota.Service, log *slog.Logger) *quotaServer {
	return &quotaServer{svc: svc, log: log, drain: make(chan struct{}), maxMsg: maxAnswerBytes,
		heavy: make(chan struct{}, runtime.GOMAXPROCS(0))}
}

// A flood's thousand streams, each decoding a thousand-usage report at
// once, were a thousand runnable goroutines, and Go's scheduler has no
// priorities: a probe Envoy's one-usage report waited its turn behind all
// of them at every hop (1.6 s in the burst's first second). So a large
// message is decoded, and a large answer encoded, holding one of
// GOMAXPROCS tokens: the others wait parked, not runnable, and a small
// message takes none. Sending and receiving are not held: a client that
// reads slowly holds no token.
const (
	heavyBytes   = 4 << 10 // a report of about 80 usages
	heavyActions = 64
)

// withHeavy runs f holding a heavy token, or returns ctx's error.
func (q *quotaServer) withHeavy(ctx context.Context, f func()) error {
	select {
	case q.heavy <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-q.heavy }()
	f()
	return nil
}

// maxAnswerBytes bounds one RateLimitQuotaResponse: gRPC clients refuse
// messages over 4 MiB by default (RESOURCE_EXHAUSTED, and the stream is
// lost), so larger answers go as several.
const maxAnswerBytes = 4<<20 - 64<<10

// stopStreams ends the streams being served and those opened later.
func (q *quotaServer) stopStreams() { q.drainOnce.Do(func() { close(q.drain) }) }

// stream is the method on either server, its messages as bytes:
// decoded and encoded by hand (rlqswire.go).
func (q *quotaServer) stream(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
	var dec reportsDecoder
	return q.serve(ctx, func() (report, error) {
		b, err := recv()
		if err != nil {
			return report{}, err
		}
		var domain string
		var usages []quota.Usage
		if len(b) < heavyBytes {
			domain, usages, err = dec.decode(b)
		} else if herr := q.withHeavy(ctx, func() { domain, usages, err = dec.decode(b) }); herr != nil {
			return report{}, herr
		}
		if err != nil {
			return report{}, status.Errorf(codes.InvalidArgument, "usage reports: %v", err)
		}
		return report{domain, usages}, nil
	}, func(acts []quota.Action) error {
		var b []byte
		encode := func() {
			n := 0
			for i := range acts {
				n += actionFrameSize(&acts[i])
			}
			b = make([]byte, 0, n)
			for i := range acts {
				b = appendAction(b, &acts[i])
			}
		}
		if len(acts) < heavyActions {
			encode()
		} else if err := q.withHeavy(ctx, encode); err != nil {
			return err
		}
		return send(b)
	})
}

// serviceDesc is the RateLimitQuotaService as the generated code
// describes it, with a stream handler whose messages are bytes to the
// codec (wireBytes) and decoded and encoded here as on the native server.
func (q *quotaServer) serviceDesc() *grpc.ServiceDesc {
	desc := rlqsv3.RateLimitQuotaService_ServiceDesc
	desc.HandlerType = (*interface {
		grpcStream(grpc.ServerStream) error
	})(nil)
	desc.Streams = []grpc.StreamDesc{{StreamName: "StreamRateLimitQuotas", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error { return srv.(*quotaServer).grpcStream(ss) }}}
	return &desc
}

// grpcStream is the method on grpc-go's server.
func (q *quotaServer) grpcStream(ss grpc.ServerStream) error {
	return q.stream(ss.Context(), func() ([]byte, error) {
		var m wireBytes
		if err := ss.RecvMsg(&m); err != nil {
			return nil, err
		}
		return m, nil
	}, func(b []byte) error { return ss.SendMsg(wireBytes(b)) })
}

// report is one RateLimitQuotaUsageReports as the quota service takes it.
type report struct {
	domain string
	usages []quota.Usage
}

// serve runs one stream until the client ends it, it fails, or drain.
//
// Two goroutines: the receiver reads the Envoy's reports and hands them to
// the quota service, which waits for room in the shards' lanes (the
// stream's back-pressure); this loop writes the actions the service
// pushes, and asks for and passes on the acknowledgements. The writes are
// never held by a report being handed over: an Envoy's 1,000-bucket report
// takes a shard several batches to take in, and its new bucket's answer,
// decided in the first, waited in the outbox for the last (a stamp: decided
// 16 ms after the report came, written at 70 ms, when the report's last
// chunk found room).
//
// The receiver belongs to the call: it ends when recv fails, which it does
// once the call is over (both servers end a call's receives when its
// method returns). It closes the quota stream as it ends, after this loop
// (the stream's last Acked) and its own last Report.
func (q *quotaServer) serve(ctx context.Context, recv func() (report, error), send func([]quota.Action) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	box := newOutbox(q.maxMsg)
	st := q.svc.Open(box)
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
	ended := make(chan error, 1) // what ended the receiver: io.EOF, or why
	loopDone := make(chan struct{})
	defer close(loopDone)
	go func() {
		defer func() {
			<-loopDone
			st.Close()
		}()
		ended <- q.receive(ctx, st, box, recv)
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
		case err := <-ended:
			if errors.Is(err, io.EOF) {
				_, err := box.flush(send)
				return err
			}
			return err
		}
	}
}

// receive hands the stream's reports to the quota service until recv or
// the service fails (io.EOF: the Envoy ended the stream), and returns why.
// What the Envoy does not read holds its next report back (box.wait), as
// the HTTP/2 window holds back what the server would write.
func (q *quotaServer) receive(ctx context.Context, st *quota.Stream, box *outbox, recv func() (report, error)) error {
	for {
		if err := box.wait(ctx); err != nil {
			return err
		}
		r, err := recv()
		if err != nil {
			return err
		}
		if err := q.report(st, r); err != nil {
			return err
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
	// taken tells a receiver waiting for room (wait) that the loop took
	// the queue.
	taken chan struct{}
}

// outboxRoom is how many actions may wait in a stream's outbox before its
// receiver hands the service no more reports: the loop takes the whole
// queue at each flush, so only a loop stuck writing (an Envoy that does
// not read its answers) lets it grow. Without the bound such a stream's
// reports were all taken (1,594 of 1,000 new buckets each in 15 s: 1.3 GB,
// and the probe Envoy answered after 0.5-0.8 s).
const outboxRoom = 1024

func newOutbox(max int) *outbox {
	return &outbox{max: max, at: make(map[string]int), ready: make(chan struct{}, 1), taken: make(chan struct{}, 1)}
}

// wait returns once fewer than outboxRoom actions wait, or ctx's error.
func (o *outbox) wait(ctx context.Context) error {
	for {
		o.mu.Lock()
		n := len(o.queue)
		o.mu.Unlock()
		if n < outboxRoom {
			return nil
		}
		select {
		case <-o.taken:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
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
	select {
	case o.taken <- struct{}{}:
	default:
	}
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

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
