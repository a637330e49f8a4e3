package server

import (
	"sort"
	"strings"
	"sync"

	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Health components, as the reference names its own.
const (
	componentBackend = "redis" // the counter store, whatever its kind
	componentSigterm = "sigterm"
	componentConfig  = "config"
)

// health is the service's overall health: healthy only when every component is.
// It mirrors itself into the gRPC health server under the service name
// "ratelimit" (the empty name stays SERVING, as grpc-go's default).
type health struct {
	mu         sync.Mutex
	components map[string]bool
	grpc       *grpchealth.Server
}

// newHealth starts with the backend not yet ready, SIGTERM not received and,
// when configured, no config loaded.
func newHealth(g *grpchealth.Server, requireConfig bool) *health {
	h := &health{components: map[string]bool{componentBackend: false, componentSigterm: true}, grpc: g}
	if requireConfig {
		h.components[componentConfig] = false
	}
	h.publish()
	return h
}

// set records a component's state. Unknown components are ignored unless
// created by newHealth (config is only tracked when required).
func (h *health) set(component string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, tracked := h.components[component]; !tracked {
		return
	}
	h.components[component] = ok
	h.publishLocked()
}

// ok is the overall state.
func (h *health) ok() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.okLocked()
}

// String lists failing components, for logs.
func (h *health) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var bad []string
	for c, ok := range h.components {
		if !ok {
			bad = append(bad, c)
		}
	}
	sort.Strings(bad)
	if len(bad) == 0 {
		return "healthy"
	}
	return "unhealthy: " + strings.Join(bad, ", ")
}

func (h *health) okLocked() bool {
	for _, ok := range h.components {
		if !ok {
			return false
		}
	}
	return true
}

func (h *health) publish() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.publishLocked()
}

func (h *health) publishLocked() {
	if h.grpc == nil {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.okLocked() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.grpc.SetServingStatus("ratelimit", st)
}
