package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/settings"
)

// k8sObject is the part of a manifest these tests read. The manifests'
// exact shape is checked against the Kubernetes API types in the
// deploy/kubernetes module.
type k8sObject struct {
	Kind     string                `yaml:"kind"`
	Metadata struct{ Name string } `yaml:"metadata"`
	Data     map[string]string     `yaml:"data"`
	Spec     struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Name string `yaml:"name"`
					Env  []struct {
						Name  string `yaml:"name"`
						Value string `yaml:"value"`
					} `yaml:"env"`
					ReadinessProbe probe `yaml:"readinessProbe"`
					LivenessProbe  probe `yaml:"livenessProbe"`
					StartupProbe   probe `yaml:"startupProbe"`
					VolumeMounts   []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
						SubPath   string `yaml:"subPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name  string `yaml:"name"`
						Items []struct {
							Key  string `yaml:"key"`
							Path string `yaml:"path"`
						} `yaml:"items"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

// k8sRules reads kubernetes/sluice.yaml: the sluice container's environment,
// and the rules ConfigMap's files as the Deployment mounts them (paths
// relative to the mount).
func k8sRules(t *testing.T) (env map[string]string, mount string, files map[string]string) {
	t.Helper()
	raw, err := os.ReadFile("kubernetes/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	configMaps := map[string]map[string]string{}
	var deploy *k8sObject
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kubernetes/sluice.yaml: %v", err)
		}
		switch o.Kind {
		case "ConfigMap":
			configMaps[o.Metadata.Name] = o.Data
		case "Deployment":
			deploy = &o
		}
	}
	if deploy == nil || len(deploy.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("kubernetes/sluice.yaml: no Deployment with one container")
	}
	c := deploy.Spec.Template.Spec.Containers[0]
	env = map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for _, v := range deploy.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		data, ok := configMaps[v.ConfigMap.Name]
		if !ok {
			t.Fatalf("volume %s mounts ConfigMap %s, which the file does not define", v.Name, v.ConfigMap.Name)
		}
		for _, vm := range c.VolumeMounts {
			if vm.Name != v.Name {
				continue
			}
			if vm.SubPath != "" {
				t.Fatal("the rules are mounted with subPath, which never sees ConfigMap updates")
			}
			files = map[string]string{}
			for _, it := range v.ConfigMap.Items {
				body, ok := data[it.Key]
				if !ok {
					t.Fatalf("volume item %s is not a key of ConfigMap %s", it.Key, v.ConfigMap.Name)
				}
				files[it.Path] = body
			}
			return env, vm.MountPath, files
		}
	}
	t.Fatal("no ConfigMap is mounted in the sluice container")
	return nil, "", nil
}

// kubelet writes a ConfigMap volume as its atomic writer does: the files in
// a fresh ..<timestamp> directory, a ..data_tmp symlink to it renamed over
// ..data, the top-level names as symlinks through ..data, the old
// directory removed.
type kubelet struct {
	dir string
	gen int
}

func (k *kubelet) write(t *testing.T, files map[string]string) {
	t.Helper()
	k.gen++
	ts := fmt.Sprintf("..2026_11_25_04_00_%02d.%d", k.gen, k.gen)
	for rel, body := range files {
		p := filepath.Join(k.dir, ts, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(k.dir, "..data"))
	tmp := filepath.Join(k.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for rel := range files {
		top := strings.Split(rel, "/")[0]
		link := filepath.Join(k.dir, top)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", top), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(k.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// sluice accepts the Deployment's environment and the ConfigMap's rules, and
// a ConfigMap update, written as the kubelet writes it, reloads the rules
// (RUNTIME_WATCH_ROOT=true on the volume's ..data symlink).
func TestKubernetesConfigMapUpdateReloadsRules(t *testing.T) {
	env, mount, files := k8sRules(t)
	if env["RUNTIME_WATCH_ROOT"] != "true" {
		t.Fatalf("RUNTIME_WATCH_ROOT=%q: the manifests rely on the symlink swap", env["RUNTIME_WATCH_ROOT"])
	}
	if _, err := settings.FromEnv(settings.FromMap(env)); err != nil {
		t.Fatalf("sluice refuses the Deployment's environment: %v", err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(mount, env["RUNTIME_ROOT"])
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		t.Fatalf("RUNTIME_ROOT %s is not inside the rules mount %s", env["RUNTIME_ROOT"], mount)
	}
	env["RUNTIME_ROOT"] = filepath.Join(dir, rel)
	settings, err := settings.FromEnv(settings.FromMap(env))
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{dir: dir}
	k.write(t, files)

	src := server.NewFileSource(settings.Config, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan server.ConfigEvent)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, events) }()
	defer func() {
		cancel()
		for range events {
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	next := func() []string {
		t.Helper()
		select {
		case ev := <-events:
			if ev.Err != nil {
				t.Fatalf("loading the mounted rules: %v", ev.Err)
			}
			cfg, err := engine.LoadConfig(ev.Files, engine.ConfigOptions{MergeDomains: settings.Config.MergeDomains})
			if err != nil {
				t.Fatalf("the ConfigMap's rules: %v", err)
			}
			return cfg.Domains()
		case <-time.After(10 * time.Second):
			t.Fatal("no configuration event")
			return nil
		}
	}
	if d := next(); len(d) != 1 || d[0] != "example" {
		t.Fatalf("first load: domains %v", d)
	}
	// kubectl apply of a changed ConfigMap: another domain in the same file.
	for path, body := range files {
		files[path] = strings.Replace(body, "domain: example", "domain: changed", 1)
	}
	k.write(t, files)
	if d := next(); len(d) != 1 || d[0] != "changed" {
		t.Fatalf("after the update: domains %v", d)
	}
}

// k8sReadiness is the sluice container's readiness probe in
// kubernetes/sluice.yaml.
func k8sReadiness(t *testing.T) probe { r, _, _ := k8sProbes(t); return r }

// k8sProbes are the sluice container's readiness, liveness and startup
// probes in kubernetes/sluice.yaml.
func k8sProbes(t *testing.T) (readiness, liveness, startup probe) {
	t.Helper()
	raw, err := os.ReadFile("kubernetes/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kubernetes/sluice.yaml: %v", err)
		}
		if o.Kind == "Deployment" && len(o.Spec.Template.Spec.Containers) == 1 {
			c := o.Spec.Template.Spec.Containers[0]
			return c.ReadinessProbe, c.LivenessProbe, c.StartupProbe
		}
	}
	t.Fatal("kubernetes/sluice.yaml: no Deployment with one container")
	return probe{}, probe{}, probe{}
}

// The manifest says /healthcheck fails while Redis does not answer, and the
// probes are meant to take a replica out within 10 s of Redis going away:
// the Deployment's own environment, against a real redis-server that is
// then killed, must turn /healthcheck to 500 within what the readiness
// probe leaves of those 10 s (10 s − period × failure threshold).
func TestKubernetesHealthFollowsRedis(t *testing.T) {
	env, _, files := k8sRules(t)
	if env["REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"] != "true" {
		t.Fatalf("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=%q: without it /healthcheck stays 200 with Redis down", env["REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"])
	}
	rp := k8sReadiness(t)
	if rp.HTTPGet == nil || rp.HTTPGet.Path != "/healthcheck" {
		t.Fatal("the readiness probe does not ask /healthcheck")
	}
	budget := 10*time.Second - time.Duration(rp.PeriodSeconds*max(rp.FailureThreshold, 1))*time.Second
	if budget <= 0 {
		t.Fatalf("readiness probe every %d s × %d failures cannot notice anything within 10 s", rp.PeriodSeconds, rp.FailureThreshold)
	}

	r := testenv.StartRedis(t, testenv.RedisOptions{})
	root := t.TempDir()
	for rel, body := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Only the addresses and the rules' place change; every other setting is
	// the manifest's.
	env["RUNTIME_ROOT"] = root
	env["REDIS_URL"] = r.Addr
	for k, v := range map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "PROMETHEUS_ADDR": "127.0.0.1:0"} {
		env[k] = v
	}
	settings, err := settings.FromEnv(settings.FromMap(env))
	if err != nil {
		t.Fatalf("the Deployment's environment: %v", err)
	}
	srv, err := server.NewServer(context.Background(), server.Options{Settings: settings,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- srv.Run(ctx, ready) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sluice: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("sluice stopped: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("sluice did not start")
	}
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	url := "http://" + srv.Addrs().HTTP.String() + "/healthcheck"
	status := func() int {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET /healthcheck: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(10 * time.Second)
	for status() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("/healthcheck never answered 200 with Redis up")
		}
		time.Sleep(50 * time.Millisecond)
	}

	r.Kill()
	killed := time.Now()
	for status() == http.StatusOK {
		if time.Since(killed) > budget {
			t.Fatalf("/healthcheck still 200 %v after Redis went away (the probe needs it within %v)", time.Since(killed).Round(time.Millisecond), budget)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("/healthcheck failed %v after Redis went away", time.Since(killed).Round(time.Millisecond))

	// Liveness does not follow Redis: its probe's path stays 200, so a
	// Redis outage restarts no replica.
	_, lp, _ := k8sProbes(t)
	if lp.HTTPGet == nil || lp.HTTPGet.Path == "/healthcheck" {
		t.Fatal("the liveness probe asks /healthcheck, which follows Redis: an outage would restart every replica")
	}
	resp, err := client.Get("http://" + srv.Addrs().HTTP.String() + lp.HTTPGet.Path)
	if err != nil {
		t.Fatalf("GET %s: %v", lp.HTTPGet.Path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("liveness %s with Redis down: %d, want 200", lp.HTTPGet.Path, resp.StatusCode)
	}
}

// A replica started while Redis is down opens its ports only once Redis
// answers (sluice retries it for ever, REDIS_STARTUP_MAX_ELAPSED_TIME 0):
// the startup probe must hold liveness off long enough not to restart it
// into a back-off that outlasts Redis's recovery.
func TestKubernetesStartupOutlastsRedisOutage(t *testing.T) {
	env, _, _ := k8sRules(t)
	if v := env["REDIS_STARTUP_MAX_ELAPSED_TIME"]; v != "" && v != "0" && v != "0s" {
		t.Fatalf("REDIS_STARTUP_MAX_ELAPSED_TIME=%s: a replica gives up on Redis and restarts", v)
	}
	_, lp, sp := k8sProbes(t)
	if sp.HTTPGet == nil || lp.HTTPGet == nil || sp.HTTPGet.Path != lp.HTTPGet.Path {
		t.Fatal("no startup probe on the liveness path")
	}
	if hold := time.Duration(sp.PeriodSeconds*sp.FailureThreshold) * time.Second; hold < 30*time.Minute {
		t.Fatalf("the startup probe holds liveness off for %v; a Redis outage can last longer", hold)
	}
}
