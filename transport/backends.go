package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
)

// backends are the counter stores of one server, as the shards see them.
type backends struct {
	main      func(shard int) engine.Backend
	perSecond func(shard int) engine.Backend // nil without a per-second store
	validator engine.KeyValidator

	mu     sync.Mutex
	owned  []engine.Backend
	closed bool
}

func (b *backends) own(x engine.Backend) engine.Backend {
	b.mu.Lock()
	b.owned = append(b.owned, x)
	b.mu.Unlock()
	return x
}

// Close closes every store once.
func (b *backends) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	var errs []error
	for _, x := range b.owned {
		errs = append(errs, x.Close())
	}
	return errors.Join(errs...)
}

// newBackends builds the stores BACKEND_TYPE names.
func newBackends(ctx context.Context, s Settings, clock func() time.Time, log *slog.Logger) (*backends, error) {
	b := &backends{}
	switch s.Backend.Type {
	case "memory":
		// One store per shard: a shard's counters are only ever its own.
		b.main = func(int) engine.Backend { return b.own(memory.New(clock)) }
		return b, nil
	case "redis", "":
		return nil, fmt.Errorf("BACKEND_TYPE=redis is not built into this binary yet; use BACKEND_TYPE=memory")
	case "memcache":
		return nil, fmt.Errorf("BACKEND_TYPE=memcache is not built into this binary yet; use BACKEND_TYPE=memory")
	}
	return nil, fmt.Errorf("Invalid setting for BackendType: %s", s.Backend.Type)
}
