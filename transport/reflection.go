package transport

import (
	"context"
	"fmt"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	v1reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphareflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/transport/h2grpc"
)

// Server reflection (grpc.reflection.v1 and v1alpha) lets ghz, grpcurl and
// k6 call the services with no .proto file, as the reference's server
// offers it. Both gRPC servers answer it with grpc-go's implementation; the
// native one feeds it the stream's messages itself.

// nativeServices are the services the native server answers, as its
// reflection lists them (grpc-go's server lists its own).
var nativeServices = []string{
	rlsv3.RateLimitService_ServiceDesc.ServiceName,
	rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName,
	healthpb.Health_ServiceDesc.ServiceName,
	v1reflectiongrpc.ServerReflection_ServiceDesc.ServiceName,
	v1alphareflectiongrpc.ServerReflection_ServiceDesc.ServiceName,
}

// serviceNames is a reflection.ServiceInfoProvider over a fixed list: the
// reflection service only needs the names.
type serviceNames []string

func (n serviceNames) GetServiceInfo() map[string]grpc.ServiceInfo {
	m := make(map[string]grpc.ServiceInfo, len(n))
	for _, name := range n {
		m[name] = grpc.ServiceInfo{}
	}
	return m
}

// nativeReflection adds the reflection methods of both versions to o. The
// two versions' messages are the same on the wire, so one implementation
// (v1's) serves both.
func nativeReflection(o *h2grpc.Options) {
	srv := reflection.NewServerV1(reflection.ServerOptions{Services: serviceNames(nativeServices)})
	m := func(ctx context.Context, recv func() ([]byte, error), send func([]byte) error) error {
		return srv.ServerReflectionInfo(&reflectionStream{ctx: ctx, recv: recv, send: send})
	}
	if o.BidiMethods == nil {
		o.BidiMethods = map[string]h2grpc.BidiMethod{}
	}
	o.BidiMethods[v1reflectiongrpc.ServerReflection_ServerReflectionInfo_FullMethodName] = m
	o.BidiMethods[v1alphareflectiongrpc.ServerReflection_ServerReflectionInfo_FullMethodName] = m
}

// reflectionStream is one native bidirectional stream in the form grpc-go's
// reflection server takes. Headers and trailers have nothing to carry here.
type reflectionStream struct {
	ctx  context.Context
	recv func() ([]byte, error)
	send func([]byte) error
}

func (s *reflectionStream) Recv() (*v1reflectiongrpc.ServerReflectionRequest, error) {
	m := new(v1reflectiongrpc.ServerReflectionRequest)
	if err := s.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

func (s *reflectionStream) Send(m *v1reflectiongrpc.ServerReflectionResponse) error {
	return s.SendMsg(m)
}

func (s *reflectionStream) RecvMsg(m any) error {
	b, err := s.recv()
	if err != nil {
		return err // io.EOF ends the reflection server's loop cleanly
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("reflection: %T is not a protobuf message", m)
	}
	if err := proto.Unmarshal(b, pm); err != nil {
		return status.Errorf(codes.InvalidArgument, "reflection: bad request message: %v", err)
	}
	return nil
}

func (s *reflectionStream) SendMsg(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("reflection: %T is not a protobuf message", m)
	}
	b, err := proto.Marshal(pm)
	if err != nil {
		return fmt.Errorf("reflection: %w", err)
	}
	return s.send(b)
}

func (s *reflectionStream) Context() context.Context     { return s.ctx }
func (s *reflectionStream) SetHeader(metadata.MD) error  { return nil }
func (s *reflectionStream) SendHeader(metadata.MD) error { return nil }
func (s *reflectionStream) SetTrailer(metadata.MD)       {}
