package server

import (
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Health components, as the reference names its own.
const (
	ComponentBackend = "redis" // the counter store, whatever its kind
	ComponentSigterm = "sigterm"
	ComponentConfig  = "config"
)

// Health is the service's overall health: healthy only when every component is.
// It mirrors itself into the gRPC health server under the service name
// "ratelimit" (the empty name stays SERVING, as grpc-go's default).
type Health struct {
	mu         sync.Mutex
	components map[string]bool
	grpc       *health.Server
}

// NewHealth starts with the backend not yet ready, SIGTERM not received and,
// when configured, no config loaded.
func NewHealth(g *health.Server, requireConfig bool) *Health {
	h := &Health{components: map[string]bool{ComponentBackend: false, ComponentSigterm: true}, grpc: g}
	if requireConfig {
		h.components[ComponentConfig] = false
	}
	h.publish()
	return h
}

// Set records a component's state. Unknown components are ignored unless
// created by NewHealth (config is only tracked when required).
func (h *Health) Set(component string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, tracked := h.components[component]; !tracked {
		return
	}
	h.components[component] = ok
	h.publishLocked()
}

// OK is the overall state.
func (h *Health) OK() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.okLocked()
}

// String lists failing components, for logs.
func (h *Health) String() string {
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

func (h *Health) okLocked() bool {
	for _, ok := range h.components {
		if !ok {
			return false
		}
	}
	return true
}

func (h *Health) publish() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.publishLocked()
}

func (h *Health) publishLocked() {
	if h.grpc == nil {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if h.okLocked() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.grpc.SetServingStatus("ratelimit", st)
}
