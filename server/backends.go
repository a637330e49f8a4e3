package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memcache"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/redis"
	"github.com/sluicehq/sluice/engine/stats"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/settings"
	"github.com/sluicehq/sluice/transport/metrics"
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
	// board is where the quota service's replicas share their claims (nil:
	// none).
	board quota.Board
	// budget is SLUICE_MEMORY_MAX_BYTES: the memory backend's counters
	// and the quota service's buckets are charged to it.
	budget *memory.Budget

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
func newBackends(ctx context.Context, s settings.Settings, clock func() time.Time, log *slog.Logger) (*backends, error) {
	b := &backends{budget: memory.NewBudget(s.Backend.Memory.MaxBytes)}
	switch s.Backend.Type {
	case "memory":
		// One store per shard: a shard's counters are only ever its own.
		// One budget for all: the bound is the process's, whatever the shard count.
		m := s.Backend.Memory
		budget := b.budget
		b.main = func(int) engine.Backend {
			return b.own(memory.NewWithOptions(memory.Options{Clock: clock, Budget: budget, MaxKeyBytes: m.MaxKeyBytes, SweepEvery: m.SweepEvery}))
		}
		b.validator = memory.KeyLimit(m.MaxKeyBytes)
		// Counters in memory are this process's alone: so is the board.
		b.board = memory.NewBoard(clock)
		return b, nil
	case "redis", "":
		// go-redis logs pool trouble through a global logger; send it to ours.
		goredis.SetLogger(redisLogger{log})
		// One client per instance, shared by every shard: go-redis pools connections.
		ro := s.Backend.Redis.Options
		ro.OnStartupFailure = unreachable(log, "REDIS_", ro)
		main, err := redis.New(ctx, ro)
		if err != nil {
			return nil, err
		}
		b.own(main)
		b.board = main
		b.pools = map[string]*redis.Backend{"ratelimit.redis_pool": main}
		b.main = func(int) engine.Backend { return main }
		b.health = append(b.health, main)
		if s.Backend.PerSecond {
			so := s.Backend.RedisPerSecond.Options
			so.OnStartupFailure = unreachable(log, "REDIS_PERSECOND_", so)
			sec, err := redis.New(ctx, so)
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
		b.board = mc
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

// unreachable logs, once, that the Redis the settings name (prefix: the
// variables') did not answer at start: what was tried and how to choose
// another backend. The default (a unix socket of twemproxy) is the
// reference's and rarely what a newcomer has.
func unreachable(log *slog.Logger, prefix string, o redis.Options) func(addr string, err error) {
	return func(addr string, err error) {
		log.Error(fmt.Sprintf("cannot reach Redis at %s (%sSOCKET_TYPE=%s, %sURL=%s): %v; retrying quietly until it answers (the gRPC, HTTP and debug ports open once it does). "+
			"Without Redis, set BACKEND_TYPE=memory (counters in this process); for another Redis, set %sSOCKET_TYPE=tcp %sURL=host:6379",
			addr, prefix, o.SocketType, prefix, addr, err, prefix, prefix),
			"backend", "redis", "addr", addr, "error", err)
	}
}

// counters are the stores and the shard actors in front of them: what a
// decision's increments go through.
type counters struct {
	back   *backends
	router *actors.Router
	// lease answers the operations of rules that count by lease, in front
	// of the router; every other operation passes through it.
	lease *lease.Counter
	// shardDepth are the sluice.shard.<i>.queue_depth gauges, set from the
	// router at each statistics flush.
	shardDepth []*stats.Gauge
}

// newCounters builds the stores (waiting for them to answer, as the reference
// does before opening any listener) and the shards. trace wraps each store
// the shards call (tracing spans); nil leaves them as they are.
func newCounters(ctx context.Context, s settings.Settings, o Options, trace func(engine.Backend) engine.Backend) (_ *counters, err error) {
	back, err := newBackends(ctx, s, o.Clock, o.Logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			back.Close()
		}
	}()
	metrics.RegisterRuntime(o.Stats)
	for scope, pool := range back.pools {
		metrics.RegisterPool(o.Stats, scope, func() metrics.PoolFigures {
			ps := pool.PoolStats()
			return metrics.PoolFigures{Active: ps.ActiveConns, Opened: ps.Dials, LocalCloses: ps.Closes}
		})
	}
	shards := s.Limiter.Shards
	if shards == 0 && s.Backend.Type != "memory" {
		// One shard makes the biggest calls and the fewest round trips; a
		// network backend's latency hides the lost parallelism (the shard
		// only does bookkeeping; its workers wait for the backend), and
		// each more shard costs CPU per decision for the same decisions.
		shards = 1
	}
	router, err := actors.New(actors.Options{
		Shards:      shards,
		Backend:     traced(back.main, trace),
		PerSecond:   traced(back.perSecond, trace),
		MaxInFlight: maxInFlight(s.Limiter.MaxInFlight, back.conns, shards),
		CallTimeout: s.Limiter.Timeout,
		// The reference's pipeline variables bound a shard's calls.
		Batch:  actors.BatchPolicy{Pipeline: back.pipeline, PerSecondPipeline: back.perSecondPipeline},
		Logger: o.Logger,
	})
	if err != nil {
		return nil, err
	}
	lo := s.Limiter.Lease
	lo.Clock, lo.Stats, lo.CallTimeout = o.Clock, o.Stats, s.Limiter.Timeout
	leases, err := lease.New(router, lo)
	if err != nil {
		router.Close()
		return nil, err
	}
	c := &counters{back: back, router: router, lease: leases}
	for i := 0; i < router.Shards(); i++ {
		c.shardDepth = append(c.shardDepth, o.Stats.Gauge(fmt.Sprintf("sluice.shard.%d.queue_depth", i)))
	}
	return c, nil
}

// traced is stores with every store wrapped by trace; nil stays nil.
func traced(stores func(shard int) engine.Backend, trace func(engine.Backend) engine.Backend) func(shard int) engine.Backend {
	if stores == nil || trace == nil {
		return stores
	}
	return func(i int) engine.Backend { return trace(stores(i)) }
}

// publishShardDepth sets each shard's queue depth gauge.
func (c *counters) publishShardDepth() {
	for i, g := range c.shardDepth {
		g.Set(int64(c.router.Pending(i)))
	}
}

// Close gives back what leases hold, stops the shards (answering what they
// hold), then closes the stores.
func (c *counters) Close() error {
	return errors.Join(c.lease.Close(), c.router.Close(), c.back.Close())
}

// defaultInFlight caps the default calls in flight per shard: a few calls
// out keep a shard's backend busy under load, while more would split the
// operations that pile up into smaller calls. At low load more calls do
// not mean many more round trips, because the batches the gRPC server
// reads together are held together (actors.Router.OpenBatch).
const defaultInFlight = 4

// maxInFlight is how many backend calls one shard may have outstanding: the
// configured value, or the connection pool shared out among the shards (so
// calls never queue for a connection), at most defaultInFlight.
func maxInFlight(configured, conns, shards int) int {
	if configured > 0 {
		return configured
	}
	if conns <= 0 || shards <= 0 {
		return 1
	}
	return min(defaultInFlight, max(1, conns/shards))
}

// redisLogger adapts slog to go-redis's internal logger.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn(fmt.Sprintf("redis: "+format, v...))
}
