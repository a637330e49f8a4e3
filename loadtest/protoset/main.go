package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Method is the RLS call, in the form ghz and k6 take it.
const Method = "envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit"

func main() {
	out := flag.String("out", "loadtest/ghz", "directory to write rls.protoset and the ghz configs to")
	host := flag.String("host", "127.0.0.1:8081", "gRPC address written into the configs (ghz's positional host overrides it)")
	flag.Parse()
	if err := run(*out, *host); err != nil {
		log.Fatalf("protoset: %v", err)
	}
}

func run(out, host string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	set, err := fileSet(rlsv3.File_envoy_service_ratelimit_v3_rls_proto)
	if err != nil {
		return err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		return fmt.Errorf("marshal descriptor set: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, "rls.protoset"), b, 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%d files, %d bytes)\n", filepath.Join(out, "rls.protoset"), len(set.File), len(b))
	for _, c := range configs(host) {
		path := filepath.Join(out, c.name+".json")
		b, err := render(c.cfg)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", path)
	}
	return nil
}

// render writes the settings indented and the data one request a line, so
// a config stays readable and diffable at 1,000 requests.
func render(c ghzConfig) ([]byte, error) {
	data := c.Data
	c.Data = nil
	head, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	b.Write(head[:len(head)-2]) // drop "\n}"
	b.WriteString(",\n  \"data\": [\n")
	for i, r := range data {
		line, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		b.WriteString("    ")
		b.Write(line)
		if i < len(data)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("  ]\n}\n")
	// The file must stay valid JSON that decodes to what was meant.
	var back ghzConfig
	if err := json.Unmarshal([]byte(b.String()), &back); err != nil || len(back.Data) != len(data) {
		return nil, fmt.Errorf("rendered config does not read back: %v", err)
	}
	return []byte(b.String()), nil
}

// fileSet is root and everything it imports, each file after its imports
// (the order protoc writes with --include_imports, which readers expect).
func fileSet(root protoreflect.FileDescriptor) (*descriptorpb.FileDescriptorSet, error) {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var visit func(fd protoreflect.FileDescriptor) error
	visit = func(fd protoreflect.FileDescriptor) error {
		if seen[fd.Path()] {
			return nil
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			imp := imports.Get(i)
			if imp.IsPlaceholder() {
				return fmt.Errorf("%s imports %s, which is not linked into this program", fd.Path(), imp.Path())
			}
			if err := visit(imp.FileDescriptor); err != nil {
				return err
			}
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
		return nil
	}
	if err := visit(root); err != nil {
		return nil, err
	}
	// Reading the set back proves it is complete and consistent.
	if _, err := protodesc.NewFiles(set); err != nil {
		return nil, fmt.Errorf("the descriptor set does not resolve: %w", err)
	}
	if !hasMethod(set, Method) {
		return nil, errors.New("the descriptor set lacks " + Method)
	}
	return set, nil
}

func hasMethod(set *descriptorpb.FileDescriptorSet, full string) bool {
	i := strings.LastIndexByte(full, '.')
	svc, method := full[:i], full[i+1:]
	for _, f := range set.File {
		for _, s := range f.Service {
			if f.GetPackage()+"."+s.GetName() != svc {
				continue
			}
			for _, m := range s.Method {
				if m.GetName() == method {
					return true
				}
			}
		}
	}
	return false
}

// The rules these configs expect are in loadtest/rules/loadtest.yaml: domain
// "loadtest", keys k0, k1, k2 with limits high enough that every decision
// is counted and none is refused.
const domain = "loadtest"

type entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}
type descriptor struct {
	Entries []entry `json:"entries"`
}
type request struct {
	Domain      string       `json:"domain"`
	Descriptors []descriptor `json:"descriptors"`
}

// ghzConfig is the part of ghz's config file these scenarios set.
type ghzConfig struct {
	Protoset    string `json:"protoset"`
	Call        string `json:"call"`
	Host        string `json:"host"`
	Insecure    bool   `json:"insecure"`
	Concurrency int    `json:"concurrency"`
	Connections int    `json:"connections"`
	Duration    string `json:"duration"`
	// DurationStop "wait" lets calls in flight at the end finish; ghz's
	// default closes their connections and counts them as Unavailable.
	DurationStop string    `json:"duration-stop"`
	Timeout      string    `json:"timeout"`
	Data         []request `json:"data,omitempty"`
}

type namedConfig struct {
	name string
	cfg  ghzConfig
}

// configs are the bench harness's workloads: 200 callers over 4
// connections for 20 s; keys rotate round-robin through the data array.
func configs(host string) []namedConfig {
	base := ghzConfig{
		// Relative to the directory ghz runs in: make ghz runs from the
		// repository root.
		Protoset: "loadtest/ghz/rls.protoset",
		Call:     Method, Host: host, Insecure: true,
		Concurrency: 200, Connections: 4, Duration: "20s", DurationStop: "wait", Timeout: "5s",
	}
	keys := base
	for i := range 1000 {
		keys.Data = append(keys.Data, request{domain, []descriptor{{[]entry{{"k0", fmt.Sprint(i)}}}}})
	}
	hot := base
	hot.Data = []request{{domain, []descriptor{{[]entry{{"k0", "hot"}}}}}}
	three := base
	for i := range 1000 {
		// Three descriptors whose values move independently, so each request
		// touches three counters and the pattern repeats only every 1,000.
		three.Data = append(three.Data, request{domain, []descriptor{
			{[]entry{{"k0", fmt.Sprint(i)}}},
			{[]entry{{"k1", fmt.Sprint((i * 7) % 1000)}}},
			{[]entry{{"k2", fmt.Sprint((i * 13) % 1000)}}},
		}})
	}
	return []namedConfig{{"keys-1000", keys}, {"hot-key", hot}, {"descriptors-3", three}}
}
