package kubernetes

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const chartDir = "../helm/sluice"

// helmBinary is helm as `make helm` installs it (scripts/helm/go.mod):
// $HELM, else on PATH, else in GOPATH/bin. Missing, the tests skip, and
// fail under SLUICE_REQUIRE_SERVERS=1 (`make test`).
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if h, err := exec.LookPath("helm"); err == nil {
		return h
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		h := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
		if _, err := os.Stat(h); err == nil {
			return h
		}
	}
	if os.Getenv("SLUICE_REQUIRE_SERVERS") == "1" {
		t.Fatal("helm is not installed: `make helm`")
	}
	t.Skip("helm is not installed: `make helm` installs it")
	return ""
}

func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helmBinary(t), args...)
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		return out, &helmError{err: err, stderr: stderr.String() + string(out)}
	}
	return out, nil
}

type helmError struct {
	err    error
	stderr string
}

func (e *helmError) Error() string { return e.err.Error() + ": " + e.stderr }

func TestHelmLint(t *testing.T) {
	out, err := helm(t, "lint", "--strict", chartDir, "--set", "image.repository=registry.example.com/sluice")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "0 chart(s) failed") {
		t.Fatalf("helm lint: %s", out)
	}
}

// helm template's output decodes strictly into the API types and fits
// together, on a cluster with the sleep preStop action and on one without.
func TestHelmTemplate(t *testing.T) {
	for _, tc := range []struct {
		name, kube string
		set        []string
		preStop    bool
		image      string
		hpa, pdb   bool
	}{
		{name: "defaults 1.34", kube: "1.34.0", preStop: true, image: "registry.example.com/sluice:0.1.0", hpa: true, pdb: true},
		{name: "1.30", kube: "1.30.0", preStop: true, image: "registry.example.com/sluice:0.1.0", hpa: true, pdb: true},
		{name: "1.29 has no sleep action", kube: "1.29.5", preStop: false, image: "registry.example.com/sluice:0.1.0", hpa: true, pdb: true},
		{name: "tag, fixed replicas", kube: "1.33.1", set: []string{"image.tag=2.1", "autoscaling.enabled=false", "podDisruptionBudget.enabled=false", "replicaCount=3"},
			preStop: true, image: "registry.example.com/sluice:2.1"},
		{name: "digest, no preStop", kube: "1.33.1", set: []string{"image.digest=sha256:0123", "preStop.mode=none"},
			image: "registry.example.com/sluice@sha256:0123", hpa: true, pdb: true},
		{name: "sleep forced", kube: "1.29.0", set: []string{"preStop.mode=sleep"}, preStop: true, image: "registry.example.com/sluice:0.1.0", hpa: true, pdb: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "rl", chartDir, "--namespace", "sluice", "--kube-version", tc.kube,
				"--set", "image.repository=registry.example.com/sluice"}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := helm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decodeAll(out)
			if err != nil {
				t.Fatalf("strict decoding: %v", err)
			}
			m := classify(t, objs)
			if (m.hpa != nil) != tc.hpa || (m.pdb != nil) != tc.pdb {
				t.Fatalf("HPA %v, PDB %v: want %v, %v", m.hpa != nil, m.pdb != nil, tc.hpa, tc.pdb)
			}
			checkFit(t, m, tc.preStop)
			if img := container(t, m.deploy).Image; img != tc.image {
				t.Errorf("image %q, want %q", img, tc.image)
			}
		})
	}
}

// The chart's default rules are the kustomize base's, whose rules the main
// module loads into sluice (deploy/kubernetes_test.go).
func TestHelmRulesAreTheBaseRules(t *testing.T) {
	out, err := helm(t, "template", "rl", chartDir, "--set", "image.repository=r/sluice")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := classify(t, objs).rules.Data, load(t).rules.Data; !maps.Equal(got, want) {
		t.Errorf("chart rules %v, base rules %v", got, want)
	}
}

// What the chart refuses, or opens only when asked.
func TestHelmTemplateChoices(t *testing.T) {
	if _, err := helm(t, "template", "rl", chartDir); err == nil || !strings.Contains(err.Error(), "image.repository is required") {
		t.Errorf("no image.repository: %v, want a refusal naming it", err)
	}
	if _, err := helm(t, "template", "rl", chartDir, "--set", "image.repository=r/s", "--set", "preStop.mode=always"); err == nil || !strings.Contains(err.Error(), "preStop.mode") {
		t.Errorf("preStop.mode=always: %v, want a refusal naming it", err)
	}
	out, err := helm(t, "template", "rl", chartDir, "--set", "image.repository=r/s", "--set", "debug.host=0.0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(out)
	if err != nil {
		t.Fatal(err)
	}
	m := classify(t, objs)
	c := container(t, m.deploy)
	if e := env(c); e["DEBUG_HOST"] != "0.0.0.0" {
		t.Errorf("debug.host=0.0.0.0 gives DEBUG_HOST=%q", e["DEBUG_HOST"])
	}
	found := false
	for _, p := range c.Ports {
		found = found || p.Name == "debug"
	}
	if !found {
		t.Error("debug.host=0.0.0.0: no debug container port")
	}
	for _, p := range m.svc.Spec.Ports {
		if p.TargetPort.StrVal == "debug" {
			t.Error("the Service exposes the debug port")
		}
	}
}
