package transport_test

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc"
	v1pb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphapb "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

const rlsService = "envoy.service.ratelimit.v3.RateLimitService"

// TestServerReflection does what grpcurl and ghz do with no .proto file,
// on both gRPC servers and both reflection versions: list the services,
// describe the RLS service from the descriptors the server sends, and call
// ShouldRateLimit with messages built from those descriptors alone.
func TestServerReflection(t *testing.T) {
	forEachGRPCServer(t, func(t *testing.T, srv map[string]string) {
		h := start(t, srv, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
		conn := h.GRPCConn(t)
		for _, version := range []string{"v1", "v1alpha"} {
			t.Run(version, func(t *testing.T) {
				ask := reflectionClient(t, conn, version)
				list := ask(&v1pb.ServerReflectionRequest{MessageRequest: &v1pb.ServerReflectionRequest_ListServices{}})
				var names []string
				for _, s := range list.GetListServicesResponse().GetService() {
					names = append(names, s.GetName())
				}
				for _, want := range []string{rlsService, "envoy.service.rate_limit_quota.v3.RateLimitQuotaService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
					if !slices.Contains(names, want) {
						t.Errorf("list services: %v lacks %s", names, want)
					}
				}
				resp := ask(&v1pb.ServerReflectionRequest{MessageRequest: &v1pb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: rlsService}})
				files := filesOf(t, resp.GetFileDescriptorResponse().GetFileDescriptorProto())
				d, err := files.FindDescriptorByName(rlsService)
				if err != nil {
					t.Fatalf("describe %s: %v", rlsService, err)
				}
				method := d.(protoreflect.ServiceDescriptor).Methods().ByName("ShouldRateLimit")
				if method == nil {
					t.Fatal("the described service has no ShouldRateLimit")
				}
				byName := ask(&v1pb.ServerReflectionRequest{MessageRequest: &v1pb.ServerReflectionRequest_FileByFilename{FileByFilename: "envoy/service/ratelimit/v3/rls.proto"}})
				if len(byName.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
					t.Errorf("file by filename: %v", byName)
				}
				callByReflection(t, conn, method)
			})
		}
	})
}

// reflectionClient opens one reflection stream of the version and returns
// a function that asks it one question (always in v1 form: the two
// versions are one message on the wire).
func reflectionClient(t *testing.T, conn *grpc.ClientConn, version string) func(*v1pb.ServerReflectionRequest) *v1pb.ServerReflectionResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	desc := &grpc.StreamDesc{StreamName: "ServerReflectionInfo", ServerStreams: true, ClientStreams: true}
	method := v1pb.ServerReflection_ServerReflectionInfo_FullMethodName
	if version == "v1alpha" {
		method = v1alphapb.ServerReflection_ServerReflectionInfo_FullMethodName
	}
	stream, err := conn.NewStream(ctx, desc, method)
	if err != nil {
		t.Fatal(err)
	}
	return func(req *v1pb.ServerReflectionRequest) *v1pb.ServerReflectionResponse {
		t.Helper()
		if err := stream.SendMsg(req); err != nil {
			t.Fatalf("send %v: %v", req, err)
		}
		resp := new(v1pb.ServerReflectionResponse)
		if err := stream.RecvMsg(resp); err != nil {
			t.Fatalf("%s reflection: %v", version, err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			t.Fatalf("%s reflection answered an error to %v: %v", version, req, e)
		}
		return resp
	}
}

// filesOf builds a registry from the serialized descriptors the server
// sent (the file and everything it imports), as a reflection client does.
func filesOf(t *testing.T, raw [][]byte) *protoregistry.Files {
	t.Helper()
	set := &descriptorpb.FileDescriptorSet{}
	for _, b := range raw {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(b, fd); err != nil {
			t.Fatal(err)
		}
		set.File = append(set.File, fd)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatalf("the descriptors sent do not make a complete set: %v", err)
	}
	return files
}

// callByReflection calls method with a request built from its descriptor
// only (JSON, as grpcurl -d takes it) and reads the answer the same way.
func callByReflection(t *testing.T, conn *grpc.ClientConn, method protoreflect.MethodDescriptor) {
	t.Helper()
	req := dynamicpb.NewMessage(method.Input())
	if err := protojson.Unmarshal([]byte(`{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"persec"}]}]}`), req); err != nil {
		t.Fatal(err)
	}
	resp := dynamicpb.NewMessage(method.Output())
	full := "/" + string(method.Parent().FullName()) + "/" + string(method.Name())
	if err := conn.Invoke(context.Background(), full, req, resp); err != nil {
		t.Fatalf("call by reflection: %v", err)
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Get(method.Output().Fields().ByName("overall_code")).Enum(); got != 1 { // OK
		t.Fatalf("call by reflection answered %s", out)
	}
}
