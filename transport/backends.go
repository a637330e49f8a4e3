package transport

import (
	"context"
	"errors"
	"fmt"
	goredis "github.com/redis/go-redis/v9"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memcache"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/redis"
)

// backends are the counter stores of one server, as the shards see them.
type backends struct {
	main      func(shard int) engine.Backend
	perSecond func(shard int) engine.Backend // nil without a per-second store
	validator engine.KeyValidator
	health    []engine.HealthReporter
	// pipeline and perSecondPipeline bound the shards' calls to each store.
	pipeline, perSecondPipeline actors.Pipeline
	// pools are the Redis clients by their statistics scope.
	pools map[string]*redis.Backend
	// conns is how many calls the store takes at once without queueing for a
	// connection (per node); 0 for inline stores.
	conns int

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

// Healthy is false when any store reports it has lost its connections.
func (b *backends) Healthy() bool {
	for _, h := range b.health {
		if !h.Healthy() {
			return false
		}
	}
	return true
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
		// One budget for all: the bound is the process's, whatever the shard count.
		m := s.Backend.Memory
		budget := memory.NewBudget(m.MaxBytes)
		b.main = func(int) engine.Backend {
			return b.own(memory.NewWithOptions(memory.Options{Clock: clock, Budget: budget, MaxKeyBytes: m.MaxKeyBytes, SweepEvery: m.SweepEvery}))
		}
		b.validator = memory.KeyLimit(m.MaxKeyBytes)
		return b, nil
	case "redis", "":
		// go-redis logs pool trouble through a global logger; send it to ours.
		goredis.SetLogger(redisLogger{log})
		// One client per instance, shared by every shard: go-redis pools connections.
		main, err := redis.New(ctx, s.Backend.Redis.Options)
		if err != nil {
			return nil, err
		}
		b.own(main)
		b.pools = map[string]*redis.Backend{"ratelimit.redis_pool": main}
		b.main = func(int) engine.Backend { return main }
		b.health = append(b.health, main)
		if s.Backend.PerSecond {
			sec, err := redis.New(ctx, s.Backend.RedisPerSecond.Options)
			if err != nil {
				b.Close()
				return nil, fmt.Errorf("per-second redis: %w", err)
			}
			b.own(sec)
			b.pools["ratelimit.redis_per_second_pool"] = sec
			b.perSecond = func(int) engine.Backend { return sec }
			b.health = append(b.health, sec)
		}
		b.pipeline, b.perSecondPipeline = s.Backend.Redis.Pipeline, s.Backend.RedisPerSecond.Pipeline
		b.conns = s.Backend.Redis.Options.PoolSize
		if s.Backend.PerSecond {
			b.conns = min(b.conns, s.Backend.RedisPerSecond.Options.PoolSize)
		}
		return b, nil
	case "memcache":
		o := s.Backend.Memcache
		o.Now, o.Logger = clock, log
		mc, err := memcache.New(ctx, o)
		if err != nil {
			return nil, err
		}
		b.own(mc)
		b.main = func(int) engine.Backend { return mc }
		b.validator = mc
		// gomemcache closes connections beyond the idle limit after each use,
		// so more calls than that would churn connections.
		b.conns = o.MaxIdleConns
		b.health = append(b.health, mc) // the reference's memcache health is stuck; ours follows the nodes
		return b, nil
	}
	//lint:ignore ST1005 the reference's exact message, which operators grep for and tests pin
	return nil, fmt.Errorf("Invalid setting for BackendType: %s", s.Backend.Type)
}

// redisLogger adapts slog to go-redis's internal logger.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn(fmt.Sprintf("redis: "+format, v...))
}
