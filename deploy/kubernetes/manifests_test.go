// Package kubernetes tests the manifests of this folder: they decode
// strictly into the Kubernetes API types, their parts refer to each other
// correctly, sluice accepts their settings and rules, and a ConfigMap update
// as the kubelet performs it reloads the rules.
package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/transport"
)

// drainGrace is how long sluice's shutdown waits for in-flight gRPC calls
// (transport.Server.shutdown) after SIGTERM.
const drainGrace = 10 * time.Second

func decoder() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, autoscalingv2.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err) // the API packages' own registration: cannot fail
		}
	}
	// Strict: an unknown or duplicated field is an error, not ignored.
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// decodeAll decodes every document of a multi-document YAML manifest.
func decodeAll(data []byte) ([]runtime.Object, error) {
	dec := decoder()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		out = append(out, obj)
	}
}

type manifests struct {
	rules   *corev1.ConfigMap
	deploy  *appsv1.Deployment
	svc     *corev1.Service
	pdb     *policyv1.PodDisruptionBudget
	hpa     *autoscalingv2.HorizontalPodAutoscaler
	redis   *appsv1.Deployment
	redisSv *corev1.Service
}

func load(t *testing.T) manifests {
	t.Helper()
	var m manifests
	for _, file := range []string{"sluice.yaml", "redis.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, o := range objs {
			switch o := o.(type) {
			case *corev1.ConfigMap:
				m.rules = o
			case *appsv1.Deployment:
				if file == "redis.yaml" {
					m.redis = o
				} else {
					m.deploy = o
				}
			case *corev1.Service:
				if file == "redis.yaml" {
					m.redisSv = o
				} else {
					m.svc = o
				}
			case *policyv1.PodDisruptionBudget:
				m.pdb = o
			case *autoscalingv2.HorizontalPodAutoscaler:
				m.hpa = o
			default:
				t.Fatalf("%s: unexpected %T", file, o)
			}
		}
	}
	if m.rules == nil || m.deploy == nil || m.svc == nil || m.pdb == nil || m.hpa == nil || m.redis == nil || m.redisSv == nil {
		t.Fatalf("missing objects: %+v", m)
	}
	return m
}

func TestManifestsDecodeStrictly(t *testing.T) {
	load(t)
	// Strictness is real: a misspelled field is refused.
	data, err := os.ReadFile("sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, typo := range [][2]string{{"terminationGracePeriodSeconds:", "terminationGracePeriod:"}, {"readinessProbe:", "readynessProbe:"}, {"minAvailable:", "minAvailible:"}} {
		bad := bytes.Replace(data, []byte(typo[0]), []byte(typo[1]), 1)
		if bytes.Equal(bad, data) {
			t.Fatalf("%s not in sluice.yaml", typo[0])
		}
		if _, err := decodeAll(bad); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: want an unknown field error, got %v", typo[1], err)
		}
	}
}

func container(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want one container", d.Name)
	}
	return d.Spec.Template.Spec.Containers[0]
}

func env(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

// port resolves a named or numbered container port.
func port(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %s", c.Name, p.StrVal)
	return 0
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestManifestsFitTogether(t *testing.T) {
	m := load(t)
	c := container(t, m.deploy)
	e := env(c)
	podLabels := m.deploy.Spec.Template.Labels

	settings, err := transport.SettingsFromEnv(transport.FromMap(e))
	if err != nil {
		t.Fatalf("sluice refuses the Deployment's environment: %v", err)
	}
	httpPort := int32(settings.Listen.Port)

	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthcheck" || port(t, c, p.HTTPGet.Port) != httpPort {
			t.Errorf("%s probe %+v: want GET /healthcheck on %d", name, p, httpPort)
		}
	}

	// SIGTERM drain: preStop, then sluice's graceful stop, within the grace period.
	var pre time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		pre = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	} else {
		t.Error("no preStop sleep: endpoints may still send traffic after the listeners close")
	}
	grace := m.deploy.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second < pre+drainGrace+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v does not cover preStop %v + drain %v + 5 s", grace, pre, drainGrace)
	}

	if !matches(m.deploy.Spec.Selector.MatchLabels, podLabels) {
		t.Error("the Deployment's selector does not match its pods")
	}
	if !matches(m.svc.Spec.Selector, podLabels) {
		t.Error("the Service does not select sluice's pods")
	}
	if !matches(m.pdb.Spec.Selector.MatchLabels, podLabels) || m.pdb.Spec.MinAvailable == nil {
		t.Error("the PodDisruptionBudget does not protect sluice's pods")
	}
	if r := m.deploy.Spec.Replicas; r == nil || m.pdb.Spec.MinAvailable.IntValue() >= int(*r) {
		t.Error("the PodDisruptionBudget allows no voluntary disruption at the Deployment's replica count")
	}
	if ref := m.hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != m.deploy.Name || ref.APIVersion != "apps/v1" {
		t.Errorf("the HPA scales %+v, not the Deployment", ref)
	}
	if m.hpa.Spec.MinReplicas == nil || *m.hpa.Spec.MinReplicas < 2 || c.Resources.Requests.Cpu().IsZero() {
		t.Error("the HPA needs minReplicas >= 2 and a CPU request to scale on")
	}

	want := map[string]int32{"grpc": int32(settings.Listen.GRPCPort), "http": httpPort}
	if settings.Stats.UsePull {
		want["metrics"] = int32(portOf(t, settings.Stats.PullAddr))
	}
	for _, sp := range m.svc.Spec.Ports {
		if w, ok := want[sp.Name]; ok {
			if got := port(t, c, sp.TargetPort); got != w {
				t.Errorf("Service port %s reaches %d, sluice listens on %d", sp.Name, got, w)
			}
			delete(want, sp.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("the Service does not expose %v", want)
	}

	// Redis: REDIS_URL is the redis Service, whose port reaches the server.
	host, p, _ := strings.Cut(e["REDIS_URL"], ":")
	if host != m.redisSv.Name || len(m.redisSv.Spec.Ports) != 1 || fmt.Sprint(m.redisSv.Spec.Ports[0].Port) != p {
		t.Errorf("REDIS_URL %q is not the redis Service %s:%v", e["REDIS_URL"], m.redisSv.Name, m.redisSv.Spec.Ports)
	}
	if !matches(m.redisSv.Spec.Selector, m.redis.Spec.Template.Labels) {
		t.Error("the redis Service does not select the redis pods")
	}
	if port(t, container(t, m.redis), m.redisSv.Spec.Ports[0].TargetPort) != 6379 {
		t.Error("the redis Service does not reach port 6379")
	}

	// Runs as the image's unprivileged user, with nothing to write.
	sc := m.deploy.Spec.Template.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Error("the pod does not run as the image's non-root user 65532")
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is writable")
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	var p int
	if _, err := fmt.Sscan(addr[i+1:], &p); err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return p
}

// rulesMount is where the Deployment mounts the rules ConfigMap, and the
// paths (relative to it) its items become.
func rulesMount(t *testing.T, m manifests) (mountPath string, items map[string]string) {
	t.Helper()
	c := container(t, m.deploy)
	for _, v := range m.deploy.Spec.Template.Spec.Volumes {
		if v.ConfigMap == nil || v.ConfigMap.Name != m.rules.Name {
			continue
		}
		for _, vm := range c.VolumeMounts {
			if vm.Name != v.Name {
				continue
			}
			if vm.SubPath != "" {
				t.Fatal("the rules are mounted with subPath, which never sees ConfigMap updates")
			}
			items = map[string]string{}
			for _, it := range v.ConfigMap.Items {
				if _, ok := m.rules.Data[it.Key]; !ok {
					t.Fatalf("volume item %s is not a key of the ConfigMap", it.Key)
				}
				items[it.Key] = it.Path
			}
			return vm.MountPath, items
		}
	}
	t.Fatal("the rules ConfigMap is not mounted")
	return "", nil
}

// kubelet writes a ConfigMap volume as its atomic writer does: the files in
// a fresh ..<timestamp> directory, a ..data_tmp symlink to it renamed over
// ..data, and the top-level names as symlinks through ..data.
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

// The ConfigMap's rules load, and an update as the kubelet performs it is
// picked up by sluice configured with the Deployment's environment
// (RUNTIME_WATCH_ROOT=true on the ..data symlink).
func TestConfigMapUpdateReloadsRules(t *testing.T) {
	m := load(t)
	mount, items := rulesMount(t, m)
	e := env(container(t, m.deploy))
	if e["RUNTIME_WATCH_ROOT"] != "true" {
		t.Fatalf("RUNTIME_WATCH_ROOT=%q: the manifests rely on the symlink swap", e["RUNTIME_WATCH_ROOT"])
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(mount, e["RUNTIME_ROOT"])
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		t.Fatalf("RUNTIME_ROOT %s is not inside the rules mount %s", e["RUNTIME_ROOT"], mount)
	}
	e["RUNTIME_ROOT"] = filepath.Join(dir, rel)
	settings, err := transport.SettingsFromEnv(transport.FromMap(e))
	if err != nil {
		t.Fatal(err)
	}

	files := map[string]string{}
	for key, path := range items {
		files[path] = m.rules.Data[key]
	}
	k := &kubelet{dir: dir}
	k.write(t, files)

	src := transport.NewFileSource(settings.Config, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan transport.ConfigEvent)
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
	next := func() *engine.Config {
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
			return cfg
		case <-time.After(10 * time.Second):
			t.Fatal("no configuration event")
			return nil
		}
	}
	first := next()
	if d := first.Domains(); len(d) != 1 || d[0] != "example" {
		t.Fatalf("first load: domains %v", d)
	}

	// kubectl apply of a changed ConfigMap: a new domain in the same file.
	for path, body := range files {
		files[path] = strings.Replace(body, "domain: example", "domain: changed", 1)
	}
	k.write(t, files)
	if d := next().Domains(); len(d) != 1 || d[0] != "changed" {
		t.Fatalf("after the update: domains %v", d)
	}
}
