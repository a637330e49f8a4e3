package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

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

// rlsServer is the gRPC RateLimitService, on grpc-go (serviceDesc) or on
// h2grpc (native, nativeBatch).
type rlsServer struct {
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

// decide is the decision on a request that arrived as a message (the
// /json endpoint's). Its bytes are decoded by the one decoder every
// request goes through (decodeRequestBuf), as if they had come over gRPC.
func decide(ctx context.Context, d Decider, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	buf, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	in := new(wireRequest)
	if err := decodeRequestBuf(buf, &in.Request, in.desc[:0], in.entries[:0]); err != nil {
		return nil, fmt.Errorf("decoding the request: %w", err)
	}
	r, err := d.ShouldRateLimit(ctx, &in.Request)
	if err != nil {
		return nil, err
	}
	return toProtoResponse(r)
}

// grpcCode is the status code of a failed decision. Errors keep the
// reference's message but carry a precise code: InvalidArgument for a bad
// request, FailedPrecondition before any config is loaded, Unavailable
// when the counters cannot be reached.
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
