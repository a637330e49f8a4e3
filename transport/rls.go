package transport

import (
	"context"
	"errors"
	"log/slog"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/engine"
)

// Decider is what the servers need from the engine: a decision, and the
// decisions of a batch (requests read together, decided with one counter
// call; see engine.Batch). Every wrapper of a Decider passes both on, so
// that wrapping one cannot turn batches off unseen.
type Decider interface {
	ShouldRateLimit(ctx context.Context, req *engine.Request) (*engine.Response, error)
	ShouldRateLimitBatch(ctx context.Context, batch engine.Batch, items []engine.BatchItem)
}

// rlsServer is the gRPC RateLimitService.
type rlsServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	decider Decider
	log     *slog.Logger
	errs    *errorLog // failed decisions, one line per interval
	// info and handler are what the hand-coded handler gives interceptors,
	// made once instead of per call.
	info    *grpc.UnaryServerInfo
	handler grpc.UnaryHandler
}

func newRLSServer(d Decider, log *slog.Logger, errs *errorLog) *rlsServer {
	s := &rlsServer{decider: d, log: log, errs: errs}
	s.info = &grpc.UnaryServerInfo{Server: s, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	s.handler = func(ctx context.Context, req any) (any, error) { return s.wireDecide(ctx, req.(*wireRequest)) }
	return s
}

// ShouldRateLimit implements the RLS v3 call. Errors keep the reference's
// message but carry a precise code: InvalidArgument for a bad request,
// FailedPrecondition before any config is loaded, Unavailable when the
// counters cannot be reached.
func (s *rlsServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := decide(ctx, s.decider, req)
	if err != nil {
		s.errs.warn(err)
		return nil, status.Error(grpcCode(err), err.Error())
	}
	return resp, nil
}

func decide(ctx context.Context, d Decider, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	r, err := d.ShouldRateLimit(ctx, toEngineRequest(req))
	if err != nil {
		return nil, err
	}
	return toProtoResponse(r)
}

func grpcCode(err error) codes.Code {
	switch {
	case errors.Is(err, engine.ErrInvalidRequest):
		return codes.InvalidArgument
	case errors.Is(err, engine.ErrNoConfig):
		return codes.FailedPrecondition
	case errors.Is(err, engine.ErrBackend):
		return codes.Unavailable
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unknown
}
