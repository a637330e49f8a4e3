// Command protoset writes the descriptors of envoy.service.ratelimit.v3 as a
// protoset (a serialized google.protobuf.FileDescriptorSet) and the ghz
// configurations that use it, so ghz and k6 can call the RLS API without
// protoc, proto files or network access.
//
// The descriptors come from the Go packages the module already links
// (go-control-plane registers every file it generated), converted back with
// protodesc.ToFileDescriptorProto, with every import included before the
// files that need it.
//
//	go run ./loadtest/protoset -out loadtest/ghz
//
// writes loadtest/ghz/rls.protoset and one ghz config per scenario of the
// bench harness: 1,000 keys, one hot key, and 3 descriptors per request. The
// configs carry their requests as a data array, which ghz sends round-robin
// for unary calls, so a config is the whole workload.
package main
