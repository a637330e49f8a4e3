package transport

import (
	"context"
	"io"
	"net"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/transport/h2grpc"
)

// grpcServer is what the listeners need of a gRPC server: grpc-go's, or
// the native one (h2grpc) that serves the unary calls without grpc-go's
// per-stream machinery.
type grpcServer interface {
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

const (
	healthCheckMethod = "/grpc.health.v1.Health/Check"
	healthWatchMethod = "/grpc.health.v1.Health/Watch"
)

// nativeServer serves ShouldRateLimit and the health service with h2grpc.
func (n *listeners) nativeServer(s *Server) (*h2grpc.Server, error) {
	l := n.opts
	rls := newRLSServer(s.decider(), s.log, s.errs)
	o := h2grpc.Options{
		Methods: map[string]h2grpc.Method{
			rlsv3.RateLimitService_ShouldRateLimit_FullMethodName: n.counted(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, rls.native),
			healthCheckMethod: n.counted(healthCheckMethod, nativeHealthCheck(s.ghs)),
		},
		StreamMethods: map[string]h2grpc.StreamMethod{
			healthWatchMethod: nativeHealthWatch(s.ghs),
		},
		BidiMethods: map[string]h2grpc.BidiMethod{
			rlqsv3.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName: s.quota.stream,
		},
		Workers:               l.StreamWorkers,
		MaxHeaderListSize:     nativeHeaderList,
		MaxConnectionAge:      l.MaxConnectionAge,
		MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		Log:                   s.log,
	}
	// Calls read together are decided together: one goroutine, one counter
	// call for them all, one write of their answers. From the moment a
	// batch is read until its operations are sent, the counters hold their
	// backend calls for it (when they make any), so that batches other
	// connections sent meanwhile share one.
	nativeReflection(&o)
	nativeLimits(l, &o)
	// FramesPerRead and WriteYieldBelow keep h2grpc's defaults: no
	// setting changes them.
	var open func() engine.Batch
	if s.o.OpenBatch != nil {
		open = s.o.OpenBatch
	}
	full := rlsv3.RateLimitService_ShouldRateLimit_FullMethodName
	o.Batches = map[string]h2grpc.BatchMethod{full: rls.nativeBatch(open, n.methodStats(full))}
	return h2grpc.NewServer(o)
}

// counted is m with the statistics the gRPC interceptor keeps for
// grpc-go's server (statsInterceptor).
func (n *listeners) counted(full string, m h2grpc.Method) h2grpc.Method {
	ms := n.methodStats(full)
	return func(ctx context.Context, req, out []byte) ([]byte, error) {
		defer ms.observe(time.Now())
		return m(ctx, req, out)
	}
}

// nativeBatch is ShouldRateLimit for calls h2grpc read together: each is
// answered as native would answer it alone, and counted in ms as counted
// counts a call. open, if not nil, opens the counters' batch as h2grpc
// dispatches the calls; without a batch to carry, every batch is served
// by one function made here.
func (s *rlsServer) nativeBatch(open func() engine.Batch, ms *methodStats) h2grpc.BatchMethod {
	unheld := func(ctx context.Context, calls []h2grpc.Call) { s.serveBatch(ctx, nil, calls, ms) }
	return func() h2grpc.BatchServe {
		if open == nil {
			return unheld
		}
		batch := open()
		if batch == nil {
			return unheld
		}
		return func(ctx context.Context, calls []h2grpc.Call) { s.serveBatch(ctx, batch, calls, ms) }
	}
}

// serveBatch decides the calls of batch and answers each.
func (s *rlsServer) serveBatch(ctx context.Context, batch engine.Batch, calls []h2grpc.Call, ms *methodStats) {
	start := time.Now()
	defer func() {
		for range calls {
			ms.observe(start)
		}
	}()
	reqs := make([]wireRequest, len(calls))
	items := make([]engine.BatchItem, 0, len(calls))
	of := make([]int, 0, len(calls)) // the call of each item
	for i := range calls {
		in := &reqs[i]
		if err := decodeRequestBuf(calls[i].In, &in.Request, in.desc[:0], in.entries[:0]); err != nil {
			calls[i].Err = errUnmarshal(err)
			continue
		}
		items = append(items, engine.BatchItem{Req: &in.Request})
		of = append(of, i)
	}
	// Also with no items: the decider closes the batch.
	s.decider.ShouldRateLimitBatch(ctx, batch, items)
	for j, it := range items {
		c := &calls[of[j]]
		resp, err := s.wireAnswer(it.Resp, it.Err)
		if err != nil {
			c.Err = err
			continue
		}
		c.Out, c.Err = appendAnswer(c.Out, resp)
	}
}

// native is ShouldRateLimit for h2grpc.
func (s *rlsServer) native(ctx context.Context, req, out []byte) ([]byte, error) {
	// Not pooled: what the engine keeps of a request after a call that
	// timed out is the garbage collector's to judge.
	in := new(wireRequest)
	if err := decodeRequestBuf(req, &in.Request, in.desc[:0], in.entries[:0]); err != nil {
		return nil, errUnmarshal(err)
	}
	resp, err := s.wireDecide(ctx, in)
	if err != nil {
		return nil, err
	}
	return appendAnswer(out, resp)
}

// appendAnswer encodes wireDecide's answer after out.
func appendAnswer(out []byte, resp any) ([]byte, error) {
	if w, ok := resp.(*wireResponse); ok {
		return w.appendTo(out), nil
	}
	return marshalAppend(out, resp.(proto.Message))
}

// nativeHealthCheck is grpc.health.v1.Health/Check on the same health
// server grpc-go would use.
func nativeHealthCheck(hs *health.Server) h2grpc.Method {
	return func(ctx context.Context, req, out []byte) ([]byte, error) {
		var in healthpb.HealthCheckRequest
		if err := proto.Unmarshal(req, &in); err != nil {
			return nil, errUnmarshal(err)
		}
		resp, err := hs.Check(ctx, &in)
		if err != nil {
			return nil, err
		}
		return marshalAppend(out, resp)
	}
}

// nativeHealthWatch is grpc.health.v1.Health/Watch on the same health
// server grpc-go would use, through a stream that only sends.
func nativeHealthWatch(hs *health.Server) h2grpc.StreamMethod {
	return func(ctx context.Context, req []byte, send func([]byte) error) error {
		var in healthpb.HealthCheckRequest
		if err := proto.Unmarshal(req, &in); err != nil {
			return errUnmarshal(err)
		}
		return hs.Watch(&in, &watchStream{ctx: ctx, send: send})
	}
}

// errUnmarshal: a request that cannot be decoded is the caller's error,
// INVALID_ARGUMENT (grpc-go says INTERNAL; its server is given this answer
// too, recvDecoded).
func errUnmarshal(err error) error {
	return status.Error(codes.InvalidArgument, "grpc: error unmarshalling request: "+err.Error())
}

// marshalAppend fails with grpc-go's status and text.
func marshalAppend(out []byte, m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{}.MarshalAppend(out, m)
	if err != nil {
		return nil, status.Error(codes.Internal, "grpc: error while marshaling: "+err.Error())
	}
	return b, nil
}

// watchStream is the grpc.ServerStreamingServer the health server's Watch
// writes to. Headers and trailers have nothing to carry here.
type watchStream struct {
	ctx  context.Context
	send func([]byte) error
	buf  []byte
}

func (w *watchStream) Send(m *healthpb.HealthCheckResponse) error { return w.SendMsg(m) }

func (w *watchStream) SendMsg(m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "grpc: cannot send a %T", m)
	}
	b, err := marshalAppend(w.buf[:0], msg)
	if err != nil {
		return err
	}
	w.buf = b
	return w.send(b)
}

func (w *watchStream) RecvMsg(any) error            { return io.EOF }
func (w *watchStream) Context() context.Context     { return w.ctx }
func (w *watchStream) SetHeader(metadata.MD) error  { return nil }
func (w *watchStream) SendHeader(metadata.MD) error { return nil }
func (w *watchStream) SetTrailer(metadata.MD)       {}
