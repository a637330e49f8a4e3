package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/reflect/protodesc"
)

func TestFileSet(t *testing.T) {
	set, err := fileSet(rlsv3.File_envoy_service_ratelimit_v3_rls_proto)
	if err != nil {
		t.Fatal(err)
	}
	// Every file comes after the files it imports.
	pos := map[string]int{}
	for i, f := range set.File {
		pos[f.GetName()] = i
	}
	for i, f := range set.File {
		for _, dep := range f.Dependency {
			j, ok := pos[dep]
			if !ok || j >= i {
				t.Errorf("%s imports %s, which is missing or comes later", f.GetName(), dep)
			}
		}
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := files.FindDescriptorByName("envoy.service.ratelimit.v3.RateLimitService"); err != nil {
		t.Error(err)
	}
}

func TestHasMethod(t *testing.T) {
	set, err := fileSet(rlsv3.File_envoy_service_ratelimit_v3_rls_proto)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method string
		want   bool
	}{
		{Method, true},
		{"envoy.service.ratelimit.v3.RateLimitService.Nope", false},
		{"envoy.service.ratelimit.v2.RateLimitService.ShouldRateLimit", false},
	}
	for _, tc := range tests {
		if got := hasMethod(set, tc.method); got != tc.want {
			t.Errorf("hasMethod(%s) = %v, want %v", tc.method, got, tc.want)
		}
	}
}

func TestConfigsRenderAndReadBack(t *testing.T) {
	tests := []struct {
		name     string
		requests int
		descs    int
		distinct int // distinct k0 values
	}{
		{"keys-1000", 1000, 1, 1000},
		{"hot-key", 1, 1, 1},
		{"descriptors-3", 1000, 3, 1000},
	}
	byName := map[string]ghzConfig{}
	for _, c := range configs("127.0.0.1:1") {
		byName[c.name] = c.cfg
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ok := byName[tc.name]
			if !ok {
				t.Fatal("missing config")
			}
			b, err := render(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var back ghzConfig
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back.Call != Method || back.Host != "127.0.0.1:1" || !back.Insecure || back.DurationStop != "wait" {
				t.Errorf("settings did not survive: %+v", back)
			}
			if len(back.Data) != tc.requests {
				t.Fatalf("%d requests, want %d", len(back.Data), tc.requests)
			}
			seen := map[string]bool{}
			for _, r := range back.Data {
				if r.Domain != domain || len(r.Descriptors) != tc.descs {
					t.Fatalf("request %+v", r)
				}
				seen[r.Descriptors[0].Entries[0].Value] = true
			}
			if len(seen) != tc.distinct {
				t.Errorf("%d distinct k0 values, want %d", len(seen), tc.distinct)
			}
		})
	}
}

// The committed protoset and configs are what the generator writes now; a
// dependency upgrade that changes the descriptors shows up here.
func TestCommittedFilesAreCurrent(t *testing.T) {
	dir := t.TempDir()
	if err := run(dir, "127.0.0.1:8081"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rls.protoset", "keys-1000.json", "hot-key.json", "descriptors-3.json"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("..", "ghz", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("loadtest/ghz/%s is stale: run go run ./loadtest/protoset", name)
		}
	}
}
