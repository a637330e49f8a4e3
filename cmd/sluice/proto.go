package main

import (
	"fmt"
	"os"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// runProto writes the services' descriptors as a protoset (a serialized
// google.protobuf.FileDescriptorSet), which ghz (--protoset), grpcurl
// (-protoset) and protoc (--descriptor_set_in) read in place of .proto
// files. They come from the descriptors compiled into the binary, so they
// are exactly what the server speaks.
func runProto(args []string) error {
	fs := newFlagSet("proto", "proto [-o FILE]   (the server also answers gRPC reflection: grpcurl -plaintext localhost:8081 list)")
	out := fs.String("o", "sluice.protoset", "file to write (\"-\": standard output)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("proto takes no arguments, got %q", fs.Args())
	}
	set := protoset(rlsv3.File_envoy_service_ratelimit_v3_rls_proto, rlqsv3.File_envoy_service_rate_limit_quota_v3_rlqs_proto)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		return fmt.Errorf("marshal descriptor set: %w", err)
	}
	if *out == "-" {
		_, err = os.Stdout.Write(b)
		return err
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s: %d files, %d bytes, services %s and %s\n", *out, len(set.File), len(b),
		rlsv3.RateLimitService_ServiceDesc.ServiceName, rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName)
	return nil
}

// protoset is the files and everything they import, each import before the
// files that need it (as protoc writes --include_imports).
func protoset(files ...protoreflect.FileDescriptor) *descriptorpb.FileDescriptorSet {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	for _, f := range files {
		add(f)
	}
	return set
}
