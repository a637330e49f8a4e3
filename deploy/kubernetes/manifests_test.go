// Package kubernetes tests the manifests of this folder: they decode
// strictly into the Kubernetes API types and their parts refer to each other
// correctly. (That sluice accepts their settings and rules, and reloads on a
// ConfigMap update, is tested in the main module: deploy/kubernetes_test.go.
// This module depends on k8s.io/api only, so a change of the main module's
// dependencies never breaks it.)
package kubernetes

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
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
)

// drainGrace is how long sluice's shutdown waits for in-flight gRPC calls
// (package transport's listeners.shutdown) after SIGTERM.
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

// classify sorts decoded objects into manifests: the redis Deployment and
// Service by name, the rest by kind. Each kind at most once.
func classify(t *testing.T, objs []runtime.Object) manifests {
	t.Helper()
	var m manifests
	once := func(kind string, set bool) {
		if set {
			t.Fatalf("more than one %s", kind)
		}
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			once("ConfigMap", m.rules != nil)
			m.rules = o
		case *appsv1.Deployment:
			if o.Name == "redis" {
				m.redis = o
			} else {
				once("Deployment", m.deploy != nil)
				m.deploy = o
			}
		case *corev1.Service:
			if o.Name == "redis" {
				m.redisSv = o
			} else {
				once("Service", m.svc != nil)
				m.svc = o
			}
		case *policyv1.PodDisruptionBudget:
			m.pdb = o
		case *autoscalingv2.HorizontalPodAutoscaler:
			m.hpa = o
		default:
			t.Fatalf("unexpected %T", o)
		}
	}
	if m.rules == nil || m.deploy == nil || m.svc == nil {
		t.Fatalf("missing objects: %+v", m)
	}
	return m
}

func load(t *testing.T) manifests {
	t.Helper()
	var objs []runtime.Object
	for _, file := range []string{"sluice.yaml", "redis.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		o, err := decodeAll(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		objs = append(objs, o...)
	}
	m := classify(t, objs)
	if m.pdb == nil || m.hpa == nil || m.redis == nil || m.redisSv == nil {
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
	checkFit(t, load(t), true)
}

// checkFit checks that the objects refer to each other correctly and that
// the sluice container is set up as docs/deploy.md says. preStop: whether
// the preStop sleep is expected.
func checkFit(t *testing.T, m manifests, preStop bool) {
	t.Helper()
	c := container(t, m.deploy)
	e := env(c)
	podLabels := m.deploy.Spec.Template.Labels

	httpPort := envPort(t, e, "PORT", 8080)

	// Readiness follows Redis (/healthcheck); liveness and startup do not
	// (/livez), so that a Redis outage restarts no replica.
	for name, pp := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"readiness": {c.ReadinessProbe, "/healthcheck"}, "liveness": {c.LivenessProbe, "/livez"}, "startup": {c.StartupProbe, "/livez"}} {
		if p := pp.p; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != pp.path || port(t, c, p.HTTPGet.Port) != httpPort {
			t.Errorf("%s probe %+v: want GET %s on %d", name, pp.p, pp.path, httpPort)
		}
	}

	// SIGTERM drain: preStop, then sluice's graceful stop, within the grace period.
	var pre time.Duration
	switch {
	case c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil:
		pre = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		if !preStop {
			t.Error("a preStop sleep where the cluster has no sleep action")
		}
	case c.Lifecycle != nil:
		t.Errorf("lifecycle %+v: the image has no shell; only a sleep action can work", c.Lifecycle)
	case preStop:
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
	checkScaling(t, m, c)
	checkDebugPrivate(t, c, e)

	want := map[string]int32{"grpc": envPort(t, e, "GRPC_PORT", 8081), "http": httpPort}
	if e["USE_PROMETHEUS"] == "true" {
		addr := e["PROMETHEUS_ADDR"]
		if addr == "" {
			addr = ":9090"
		}
		want["metrics"] = int32(portOf(t, addr))
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

	// Runs as the image's unprivileged user, with nothing to write.
	sc := m.deploy.Spec.Template.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Error("the pod does not run as the image's non-root user 65532")
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is writable")
	}
	checkRulesMount(t, m, c)
	if m.redis == nil {
		return
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
}

// envPort is a port sluice reads from the environment, or its default.
func envPort(t *testing.T, env map[string]string, name string, def int32) int32 {
	t.Helper()
	v, ok := env[name]
	if !ok {
		return def
	}
	var p int32
	if _, err := fmt.Sscan(v, &p); err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return p
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
