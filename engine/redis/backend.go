package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/backoff"
	"github.com/sluicehq/sluice/internal/tick"
	"github.com/sluicehq/sluice/internal/tlsclient"
)

// ErrClosed is returned by Exec after Close.
var ErrClosed = errors.New("redis backend closed")

// Backend is the Redis counter backend.
type Backend struct {
	opts   Options
	masked string // URL without credentials, for messages
	client goredis.UniversalClient
	conns  connCounter
	// pipes keeps client's pipelines for reuse: one is three allocations,
	// and Exec leaves it empty.
	pipes sync.Pool

	closed     atomic.Bool
	closeOnce  sync.Once
	closeErr   error
	cancel     context.CancelFunc // stops the health loop
	healthDone chan struct{}      // closed when the health loop has ended
}

var (
	_ engine.Backend        = (*Backend)(nil)
	_ engine.HealthReporter = (*Backend)(nil)
)

// New validates o, builds the client and PINGs until PONG, retrying with
// exponential backoff (factor 2, jitter). With StartupMaxElapsed 0 it retries
// until ctx ends.
func New(ctx context.Context, o Options) (*Backend, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("redis options: %w", err)
	}
	eps, err := o.endpoints()
	if err != nil {
		return nil, fmt.Errorf("redis options: %w", err)
	}
	tlsCfg, err := tlsclient.Optional(o.TLS, o.TLSCACert, o.TLSCert, o.TLSKey, o.TLSSkipHostnameVerification)
	if err != nil {
		return nil, fmt.Errorf("redis TLS: %w", err)
	}
	b := &Backend{opts: o, masked: maskURL(o.URL)}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		client := b.newClient(eps, tlsCfg)
		err := ping(ctx, client)
		if err == nil {
			b.client = client
			break
		}
		_ = client.Close()
		if attempt == 0 && o.OnStartupFailure != nil {
			o.OnStartupFailure(b.masked, err)
		}
		elapsed := time.Since(start)
		if o.StartupMaxElapsed > 0 && elapsed >= o.StartupMaxElapsed {
			return nil, fmt.Errorf("timed out waiting for Redis connection to %s after %s: %w", b.masked, elapsed.Round(time.Millisecond), err)
		}
		d := backoff.Delay(attempt, o.StartupInitialInterval, o.StartupMaxInterval, rand.Float64())
		if o.StartupMaxElapsed > 0 {
			d = min(d, o.StartupMaxElapsed-elapsed)
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("context cancelled while waiting for Redis connection to %s: %w (last error: %v)", b.masked, ctx.Err(), err)
		}
	}
	if o.HealthCheckActiveConnection {
		hctx, cancel := context.WithCancel(context.Background())
		b.cancel = cancel
		b.healthDone = make(chan struct{})
		go b.healthLoop(hctx)
	}
	return b, nil
}

func ping(ctx context.Context, c goredis.UniversalClient) error {
	res, err := c.Ping(ctx).Result()
	if err != nil {
		return err
	}
	if res != "PONG" {
		return fmt.Errorf("unexpected PING response: %q", res)
	}
	return nil
}

// newClient builds the go-redis client for o.Type. Client-side retries are
// off everywhere: a retried INCRBY could count twice. Pipelines run on the
// main pool (PipelinePoolSize -1) so that PoolSize bounds the connections,
// as REDIS_POOL_SIZE does in the reference; go-redis would otherwise add a
// second pool of its own for pipelines.
func (b *Backend) newClient(eps endpointSet, tlsCfg *tls.Config) goredis.UniversalClient {
	o := b.opts
	user, pass := splitAuth(o.Auth)
	// Userinfo in a data node's address stands in for REDIS_AUTH; in
	// sentinel mode the addresses are the sentinels', so it is theirs.
	if o.Auth == "" && eps.nodes[0].hasAuth && !strings.EqualFold(o.Type, typeSentinel) {
		user, pass = eps.nodes[0].user, eps.nodes[0].password
	}
	addrs := make([]string, len(eps.nodes))
	for i, ep := range eps.nodes {
		addrs[i] = ep.addr
	}
	// One set of options, converted by go-redis to the kind asked for.
	u := &goredis.UniversalOptions{
		Addrs:                 addrs,
		Username:              user,
		Password:              pass,
		PoolSize:              o.PoolSize,
		DialTimeout:           o.DialTimeout,
		TLSConfig:             tlsCfg,
		MaxRetries:            -1,
		PipelinePoolSize:      -1,
		Protocol:              2,
		DisableIdentity:       true,
		ContextTimeoutEnabled: true,
	}
	switch strings.ToLower(o.Type) {
	case typeSentinel:
		u.MasterName = eps.masterName
		u.SentinelUsername, u.SentinelPassword = splitAuth(o.SentinelAuth)
		if o.SentinelAuth == "" && eps.nodes[0].hasAuth {
			u.SentinelUsername, u.SentinelPassword = eps.nodes[0].user, eps.nodes[0].password
		}
		c := goredis.NewFailoverClient(u.Failover())
		c.AddHook(&b.conns)
		return c
	case typeCluster:
		co := u.Cluster()
		// Node clients are where the connections live: count them there.
		co.NewClient = func(opt *goredis.Options) *goredis.Client {
			c := goredis.NewClient(opt)
			c.AddHook(&b.conns)
			return c
		}
		return goredis.NewClusterClient(co)
	default:
		so := u.Simple()
		so.Network = strings.ToLower(o.SocketType)
		so.DB = eps.nodes[0].db
		c := goredis.NewClient(so)
		c.AddHook(&b.conns)
		return c
	}
}

// Exec sends, in one pipeline, INCRBY key hits + EXPIRE key ttl
// for every increment and reservation, GET for every read and EVALSHA of a
// script (scripts.go) for every bucket step, token take and release, and fills After from the replies. The shards
// size the batch (REDIS_PIPELINE_LIMIT is enforced there, per store), so the
// backend never splits it.
func (b *Backend) Exec(ctx context.Context, batch []engine.CounterOp) error {
	if b.closed.Load() {
		return ErrClosed
	}
	for i := range batch {
		if k := batch[i].Kind; k != engine.OpAdd && k != engine.OpReserve && k != engine.OpRelease {
			continue
		}
		if batch[i].Hits > math.MaxInt64 {
			return fmt.Errorf("redis: increment %q: hits %d exceed INCRBY's int64 range", batch[i].Key, batch[i].Hits)
		}
		if batch[i].TTL <= 0 && batch[i].Kind != engine.OpRelease {
			return fmt.Errorf("redis: increment %q: TTL %s must be positive (EXPIRE 0 deletes the key)", batch[i].Key, batch[i].TTL)
		}
	}
	c := getCall(len(batch))
	defer putCall(c)
	cmds := c.cmds
	pipe, _ := b.pipes.Get().(goredis.Pipeliner)
	if pipe == nil {
		pipe = b.client.Pipeline()
	}
	defer func() {
		pipe.Discard()
		b.pipes.Put(pipe)
	}()
	for i := range batch {
		op := &batch[i]
		switch op.Kind {
		case engine.OpGet:
			c.queueOn(ctx, pipe)
			cmds[i] = pipe.Get(ctx, op.Key)
		case engine.OpTokenBucket, engine.OpTokenTake, engine.OpRelease:
			c.queueOn(ctx, pipe)
			sc := scriptOf(op.Kind)
			cmds[i] = pipe.EvalSha(ctx, sc.Hash(), []string{op.Key}, scriptArgs(op)...)
		default:
			// INCRBY and EXPIRE of every key live in the call's arrays and
			// point at the key and hits in the batch: no allocation per key.
			n := len(c.args)
			c.ttls = append(c.ttls, engine.CeilSeconds(op.TTL))
			c.args = append(c.args, "incrby", &op.Key, &op.Hits, "expire", &op.Key, &c.ttls[len(c.ttls)-1])
			c.ints = append(c.ints, *goredis.NewIntCmd(ctx, c.args[n:n+3:n+3]...))
			c.bools = append(c.bools, *goredis.NewBoolCmd(ctx, c.args[n+3:n+6:n+6]...))
			incr := &c.ints[len(c.ints)-1]
			cmds[i] = incr
			c.queue = append(c.queue, incr, &c.bools[len(c.bools)-1])
		}
	}
	c.queueOn(ctx, pipe)
	_, err := pipe.Exec(ctx)
	if err != nil && (!expected(err) || !onlyExpectedErrors(cmds)) {
		return fmt.Errorf("redis: pipeline of %d keys: %w", len(batch), err)
	}
	if err := b.rerunUnloaded(ctx, batch, cmds); err != nil {
		return fmt.Errorf("redis: script: %w", err)
	}
	for i := range batch {
		var v int64
		switch c := cmds[i].(type) {
		case *goredis.IntCmd:
			v = c.Val()
		case *goredis.StringCmd:
			if c.Err() == nil { // redis.Nil: a missing counter reads as zero
				if v, err = c.Int64(); err != nil {
					return fmt.Errorf("redis: GET %q: %w", batch[i].Key, err)
				}
			}
		case *goredis.Cmd:
			if v, err = c.Int64(); err != nil {
				return fmt.Errorf("redis: %s %q: %w", scriptName(batch[i].Kind), batch[i].Key, err)
			}
		}
		// A counter someone decremented below zero reads as zero.
		batch[i].After = uint64(max(v, 0))
	}
	return nil
}

// call is the working memory of one Exec, pooled: the INCRBY and
// EXPIRE commands of a whole batch and their arguments live in a few arrays
// instead of three or four objects per key, and the arguments point at the
// batch's keys and hits instead of boxing copies. It costs 3 allocations per
// key otherwise, the most of any step of a decision on Redis.
type call struct {
	cmds  []goredis.Cmder // per batch entry, the command whose reply answers it
	ints  []goredis.IntCmd
	bools []goredis.BoolCmd
	ttls  []int64
	args  []any
	// queue is the commands not yet handed to the pipeline, in order: one
	// BatchProcess appends them at once, where one per key would grow the
	// pipeline's own slice (empty after every Exec) by doubling.
	queue []goredis.Cmder
}

var calls sync.Pool

// maxPooledKeys bounds the batches whose memory is kept for the next call:
// a rare huge batch should not pin its arrays.
const maxPooledKeys = 4096

// getCall returns a call for a batch of n entries, with arrays big enough
// that no append in Exec reallocates.
func getCall(n int) *call {
	c, _ := calls.Get().(*call)
	if c == nil {
		c = &call{}
	}
	if cap(c.cmds) < n {
		c.cmds = make([]goredis.Cmder, n)
		c.ints = make([]goredis.IntCmd, 0, n)
		c.bools = make([]goredis.BoolCmd, 0, n)
		c.ttls = make([]int64, 0, n)
		c.args = make([]any, 0, 6*n)
		c.queue = make([]goredis.Cmder, 0, 2*n)
	}
	c.cmds = c.cmds[:n]
	return c
}

// putCall clears c, so that it holds on to no batch, and pools it.
func putCall(c *call) {
	if cap(c.cmds) > maxPooledKeys {
		return
	}
	clear(c.cmds)
	clear(c.ints)
	clear(c.bools)
	clear(c.args)
	// The queue is empty: Exec ends by handing it to the pipeline.
	c.ints, c.bools, c.ttls, c.args = c.ints[:0], c.bools[:0], c.ttls[:0], c.args[:0]
	calls.Put(c)
}

// queueOn hands the queued commands to pipe, keeping their order with the
// commands that pipe's own methods queue.
func (c *call) queueOn(ctx context.Context, pipe goredis.Pipeliner) {
	if len(c.queue) > 0 {
		_ = pipe.BatchProcess(ctx, c.queue...)
		clear(c.queue)
		c.queue = c.queue[:0]
	}
}

// onlyExpectedErrors: a missing key (GET) and a script the server has not
// loaded yet (NOSCRIPT, rerun below) are answers, not failures.
func onlyExpectedErrors(cmds []goredis.Cmder) bool {
	for _, c := range cmds {
		if err := c.Err(); err != nil && !expected(err) {
			return false
		}
	}
	return true
}

func expected(err error) bool {
	return errors.Is(err, goredis.Nil) || goredis.HasErrorPrefix(err, "NOSCRIPT")
}

// rerunUnloaded sends again, in order and with the script's text (EVAL, which
// also loads it), the script calls a server refused with NOSCRIPT: after a
// restart, a failover or SCRIPT FLUSH. NOSCRIPT means the step did not run.
func (b *Backend) rerunUnloaded(ctx context.Context, batch []engine.CounterOp, cmds []goredis.Cmder) error {
	var pipe goredis.Pipeliner
	for i := range batch {
		sc := scriptOf(batch[i].Kind)
		if sc == nil || !goredis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			continue
		}
		if pipe == nil {
			pipe = b.client.Pipeline()
		}
		cmds[i] = pipe.Eval(ctx, scriptText[sc], []string{batch[i].Key}, scriptArgs(&batch[i])...)
	}
	if pipe == nil {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return err
}

// Healthy reports false after Close, and when HealthCheckActiveConnection is
// on and no connection to Redis is alive; otherwise it is true, as in the
// reference (a dead Redis then shows as request errors, not as health).
func (b *Backend) Healthy() bool {
	if b.closed.Load() {
		return false
	}
	return !b.opts.HealthCheckActiveConnection || b.conns.live.Load() > 0
}

// healthLoop pings every interval so that connections to a dead server are
// found and dropped, and a recovered server is dialed again, also without
// traffic. It ends when ctx is cancelled by Close.
func (b *Backend) healthLoop(ctx context.Context) {
	defer close(b.healthDone)
	tick.Every(ctx.Done(), b.opts.HealthCheckInterval, func() {
		pctx, cancel := context.WithTimeout(ctx, b.opts.HealthCheckInterval)
		defer cancel()
		if cc, ok := b.client.(*goredis.ClusterClient); ok {
			_ = cc.ForEachShard(pctx, func(ctx context.Context, c *goredis.Client) error { return c.Ping(ctx).Err() })
		} else {
			_ = b.client.Ping(pctx).Err()
		}
	})
}

// PoolStats are connection pool figures for metrics. ActiveConns, Dials and
// Closes match the reference's cx_active, cx_total and cx_local_close.
type PoolStats struct {
	ActiveConns int64
	Dials       int64
	Closes      int64
	// From go-redis, summed over nodes in cluster mode.
	Hits, Misses, Timeouts       uint32
	TotalConns, IdleConns, Stale uint32
}

// PoolStats returns the current pool figures.
func (b *Backend) PoolStats() PoolStats {
	s := b.client.PoolStats()
	return PoolStats{
		ActiveConns: b.conns.live.Load(),
		Dials:       b.conns.dials.Load(),
		Closes:      b.conns.closes.Load(),
		Hits:        s.Hits,
		Misses:      s.Misses,
		Timeouts:    s.Timeouts,
		TotalConns:  s.TotalConns,
		IdleConns:   s.IdleConns,
		Stale:       s.StaleConns,
	}
}

// Close stops the health loop and closes every connection. Later calls
// return the first result.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		if b.cancel != nil {
			b.cancel()
			<-b.healthDone
		}
		if err := b.client.Close(); err != nil {
			b.closeErr = fmt.Errorf("redis: close client: %w", err)
		}
	})
	return b.closeErr
}
