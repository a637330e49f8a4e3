package memcache

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/backoff"
	"github.com/sluicehq/sluice/internal/ratelog"
	"github.com/sluicehq/sluice/internal/tick"
	"github.com/sluicehq/sluice/internal/tlsclient"
)

// ErrClosed is returned by Exec after Close.
var ErrClosed = errors.New("memcache backend closed")

// MaxKeyLen is memcached's key length limit in bytes.
const MaxKeyLen = 250

// maxRelativeExpiration is memcached's cut-off: larger expirations are read
// as absolute unix times.
const maxRelativeExpiration = 30 * 24 * 60 * 60

// Backend is the memcache counter backend.
type Backend struct {
	opts    Options
	client  *memcache.Client
	servers *memcache.ServerList
	log     *slog.Logger
	failed  *ratelog.Warner // failed increments: one line per interval during an outage
	now     func() time.Time

	jobs        chan job
	abort       chan struct{} // closed when Close stops waiting for the queue
	workersLeft atomic.Int32
	workersDone chan struct{} // closed by the last worker to exit

	mu       sync.Mutex // guards closed and the inflight registration
	closed   bool
	inflight sync.WaitGroup // Exec calls that may still enqueue

	cancelBG  context.CancelFunc // stops SRV refresh and health loops
	bgDone    sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	healthy atomic.Bool
	stats   counters

	// testHookBeforeAdd runs between a missed increment and the add, so a
	// test can create the key in that window and force the add race.
	testHookBeforeAdd func(key string)
}

type counters struct {
	applied, failed, dropped, addRaces atomic.Uint64
}

// Stats are the backend's background increment figures.
type Stats struct {
	Applied  uint64 // increments applied to memcached
	Failed   uint64 // increments that failed (logged)
	Dropped  uint64 // increments Close gave up on after DrainTimeout
	AddRaces uint64 // adds that lost to a concurrent add and incremented instead
	Queued   int    // increments waiting for a worker now
}

type job struct {
	key        string
	hits       uint64
	expiration int32
}

var (
	_ engine.Backend        = (*Backend)(nil)
	_ engine.KeyValidator   = (*Backend)(nil)
	_ engine.HealthReporter = (*Backend)(nil)
)

// New validates o, resolves the nodes (SRV failures are errors, as in the
// reference), and starts the worker pool, the health loop and, with
// SRVRefresh, the SRV refresh loop. Unreachable nodes do not fail New; they
// show in Healthy. ctx bounds the first SRV lookup.
func New(ctx context.Context, o Options) (*Backend, error) {
	if err := o.EnsureDefaults().Validate(); err != nil {
		return nil, fmt.Errorf("memcache options: %w", err)
	}
	tlsCfg, err := tlsclient.Optional(o.TLS, o.TLSCACert, o.TLSCert, o.TLSKey, o.TLSSkipHostnameVerification)
	if err != nil {
		return nil, fmt.Errorf("memcache TLS: %w", err)
	}
	b := &Backend{
		opts:        o,
		servers:     new(memcache.ServerList),
		log:         o.Logger,
		now:         o.Now,
		jobs:        make(chan job, o.QueueSize),
		abort:       make(chan struct{}),
		workersDone: make(chan struct{}),
	}
	b.failed = ratelog.New(b.log, "memcache increment failed", ratelog.DefaultInterval)
	if o.SRV != "" {
		if err := b.refreshSRV(ctx); err != nil {
			//lint:ignore ST1005 the reference's exact message, which operators grep for and tests pin
			return nil, fmt.Errorf("Unable to fetch servers from SRV %s: %w", o.SRV, err)
		}
	} else if err := b.servers.SetServers(o.HostPorts...); err != nil {
		return nil, fmt.Errorf("memcache servers %v: %w", o.HostPorts, err)
	}
	b.client = memcache.NewFromSelector(b.servers)
	b.client.Timeout = o.Timeout
	b.client.MaxIdleConns = o.MaxIdleConns
	if tlsCfg != nil {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: o.Timeout}, Config: tlsCfg}
		b.client.DialContext = d.DialContext
	}
	b.record(b.client.Ping())

	bgCtx, cancel := context.WithCancel(context.Background())
	b.cancelBG = cancel
	b.every(bgCtx, o.HealthCheckInterval, b.ping)
	if o.SRV != "" && o.SRVRefresh > 0 {
		b.every(bgCtx, o.SRVRefresh, b.refreshSRVOrKeep)
	}
	b.workersLeft.Store(int32(o.Workers))
	for range o.Workers {
		go b.worker()
	}
	return b, nil
}

// ValidateKey rejects keys memcached cannot store: empty, longer than 250
// bytes, or holding whitespace or control characters.
func (b *Backend) ValidateKey(key string) error { return ValidateKey(key) }

// ValidateKey is the check behind Backend.ValidateKey.
func ValidateKey(key string) error {
	if key == "" {
		return errors.New("memcache key is empty")
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("memcache %s is over the %d-byte limit", keyRef(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
			return fmt.Errorf("memcache %s has whitespace %q at byte %d", keyRef(key), c, i)
		case c < ' ' || c == 0x7f:
			return fmt.Errorf("memcache %s has control character 0x%02x at byte %d", keyRef(key), c, i)
		}
	}
	return nil
}

// Exec reads all counters with one GetMulti, fills After with
// stored value + hits (the stored value for a read), and queues the
// increments for the workers. It waits only when the queue is full. Token
// bucket steps are applied before it returns, in order, each by a
// compare-and-swap (see bucketStep).
func (b *Backend) Exec(ctx context.Context, batch []engine.CounterOp) error {
	if len(batch) == 0 {
		return nil
	}
	keys := make([]string, 0, len(batch))
	jobs := make([]job, 0, len(batch))
	atomic := false
	for i := range batch {
		op := &batch[i]
		if err := ValidateKey(op.Key); err != nil {
			return fmt.Errorf("memcache: %w", err)
		}
		if atomicKind(op.Kind) {
			atomic = true
			continue
		}
		if op.Kind == engine.OpAdd {
			if op.TTL <= 0 {
				return fmt.Errorf("memcache: increment %s: TTL %s must be positive (0 never expires)", keyRef(op.Key), op.TTL)
			}
			jobs = append(jobs, job{key: op.Key, hits: op.Hits, expiration: b.expiration(op.TTL)})
		}
		keys = append(keys, op.Key)
	}

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.inflight.Add(1)
	b.mu.Unlock()
	defer b.inflight.Done()

	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memcache: %w", err)
	}
	if atomic {
		if err := b.atomicOps(ctx, batch); err != nil {
			return err
		}
	}
	if len(keys) == 0 {
		return nil
	}
	items, err := b.client.GetMulti(keys)
	b.record(err)
	if err != nil {
		return fmt.Errorf("memcache: GetMulti of %d keys: %w", len(keys), err)
	}
	for i := range batch {
		op := &batch[i]
		if atomicKind(op.Kind) {
			continue
		}
		var stored uint64
		if it, ok := items[op.Key]; ok {
			if stored, err = parseCounter(it.Value); err != nil {
				return fmt.Errorf("memcache: %s: %w", keyRef(op.Key), err)
			}
		}
		op.After = satAdd(stored, op.Hits)
		if op.Kind == engine.OpGet {
			op.After = stored
		}
	}
	for i, j := range jobs {
		select {
		case b.jobs <- j:
		case <-ctx.Done():
			return fmt.Errorf("memcache: queue increments (%d of %d queued): %w", i, len(jobs), ctx.Err())
		}
	}
	return nil
}

// bucketCASAttempts bounds the compare-and-swap retries of one bucket step:
// each lost race means another step on the key went through, so under heavy
// contention a step fails rather than spinning.
const bucketCASAttempts = 16

// errContended is a step (or board exchange) that lost bucketCASAttempts
// races in a row: nothing of it was stored.
var errContended = fmt.Errorf("gave up after %d compare-and-swap conflicts", bucketCASAttempts)

// bucketStep applies one GCRA step: gets the TAT with its CAS id, computes
// the step, and stores it with CompareAndSwap (Add when the key is missing),
// retrying a bounded number of times when another writer got there first.
func (b *Backend) bucketStep(ctx context.Context, op *engine.CounterOp) error {
	for attempt := 0; attempt < bucketCASAttempts; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		it, err := b.client.Get(op.Key)
		b.record(err)
		var tat int64
		switch {
		case errors.Is(err, memcache.ErrCacheMiss):
			it = nil
		case err != nil:
			return fmt.Errorf("get: %w", err)
		default:
			n, perr := parseCounter(it.Value)
			if perr != nil {
				return perr
			}
			tat = int64(min(n, math.MaxInt64))
		}
		op.After = uint64(tat)
		next, ok := engine.TokenBucketStep(tat, op)
		if op.Kind == engine.OpTokenTake {
			var took uint64
			next, took = engine.TokenBucketTake(tat, op)
			ok = took > 0
		}
		if !ok || op.Hits == 0 {
			return nil
		}
		value := []byte(strconv.FormatInt(next, 10))
		exp := b.expiration(engine.TokenBucketTTL(next, op.Bucket.Now))
		err = b.addOrSwap(it, op.Key, value, exp)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, memcache.ErrCASConflict), errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
			// Someone else stepped (or the key expired) in between: read
			// again after a pause that grows and spreads the writers out;
			// without it, writers that lose once tend to lose again in
			// lockstep, replicas on one hot key above all.
			t := time.NewTimer(backoff.Delay(attempt, 50*time.Microsecond, 5*time.Millisecond, rand.Float64()))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		default:
			return fmt.Errorf("store: %w", err)
		}
	}
	return errContended
}

// parseCounter reads a stored counter. memcached keeps incremented values as
// decimal text and may pad them with spaces.
func parseCounter(v []byte) (uint64, error) {
	s := strings.TrimRight(string(v), " ")
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stored value %.32q is not a counter: %w", v, err)
	}
	return n, nil
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// expiration converts a TTL to memcached's expiration field: whole seconds,
// rounded up; above 30 days as an absolute unix time, because memcached reads
// larger values that way (a relative month would otherwise expire at once).
// addOrSwap writes value under key: added when it (the item read before)
// is nil, else swapped in if no one wrote it meanwhile (CAS). The error is
// recorded; memcache.ErrNotStored and ErrCASConflict mean someone did.
func (b *Backend) addOrSwap(it *memcache.Item, key string, value []byte, exp int32) error {
	var err error
	if it == nil {
		err = b.client.Add(&memcache.Item{Key: key, Value: value, Expiration: exp})
	} else {
		it.Value, it.Expiration = value, exp
		err = b.client.CompareAndSwap(it)
	}
	b.record(err)
	return err
}

func (b *Backend) expiration(ttl time.Duration) int32 {
	secs := engine.CeilSeconds(ttl)
	if secs > maxRelativeExpiration {
		secs += b.now().Unix()
	}
	return int32(min(secs, math.MaxInt32))
}

// worker applies queued increments until the queue is closed, or skips them
// once Close has given up waiting.
func (b *Backend) worker() {
	defer func() {
		if b.workersLeft.Add(-1) == 0 {
			close(b.workersDone)
		}
	}()
	for j := range b.jobs {
		select {
		case <-b.abort:
			b.stats.dropped.Add(1)
			continue
		default:
		}
		if err := b.apply(j); err != nil {
			b.stats.failed.Add(1)
			b.failed.Warn(err, "key", j.key, "hits", j.hits)
		} else {
			b.stats.applied.Add(1)
		}
	}
}

// apply is the reference's dance: increment; on a miss add; if the add
// lost a race, increment again.
func (b *Backend) apply(j job) error {
	_, err := b.client.Increment(j.key, j.hits)
	b.record(err)
	if !errors.Is(err, memcache.ErrCacheMiss) {
		if err != nil {
			return fmt.Errorf("increment: %w", err)
		}
		return nil
	}
	if b.testHookBeforeAdd != nil {
		b.testHookBeforeAdd(j.key)
	}
	err = b.client.Add(&memcache.Item{Key: j.key, Value: []byte(strconv.FormatUint(j.hits, 10)), Expiration: j.expiration})
	b.record(err)
	if !errors.Is(err, memcache.ErrNotStored) {
		if err != nil {
			return fmt.Errorf("add: %w", err)
		}
		return nil
	}
	b.stats.addRaces.Add(1)
	_, err = b.client.Increment(j.key, j.hits)
	b.record(err)
	if err != nil {
		return fmt.Errorf("increment after a lost add: %w", err)
	}
	return nil
}

// record keeps the health signal: did the last operation reach a server?
// Protocol answers (miss, not stored, client errors) did.
func (b *Backend) record(err error) {
	b.healthy.Store(!unreachable(err))
}

func unreachable(err error) bool {
	if err == nil {
		return false
	}
	var cte *memcache.ConnectTimeoutError
	var ne net.Error
	return errors.Is(err, memcache.ErrNoServers) || errors.As(err, &cte) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Healthy reports whether the last operation, a request or the periodic
// ping, reached the memcached servers.
func (b *Backend) Healthy() bool {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	return !closed && b.healthy.Load()
}

// Stats returns the background increment figures.
func (b *Backend) Stats() Stats {
	return Stats{
		Applied:  b.stats.applied.Load(),
		Failed:   b.stats.failed.Load(),
		Dropped:  b.stats.dropped.Load(),
		AddRaces: b.stats.addRaces.Load(),
		Queued:   len(b.jobs),
	}
}

// every runs fn at each tick of interval until ctx ends (Close cancels it);
// the health ping and the SRV refresh are such background loops.
func (b *Backend) every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	b.bgDone.Add(1)
	go func() {
		defer b.bgDone.Done()
		tick.Every(ctx.Done(), interval, func() { fn(ctx) })
	}()
}

// ping keeps Healthy current without traffic.
func (b *Backend) ping(context.Context) { b.record(b.client.Ping()) }

// refreshSRVOrKeep refreshes the server list, keeping the previous one when
// the lookup fails: a DNS hiccup must not empty it.
func (b *Backend) refreshSRVOrKeep(ctx context.Context) {
	if err := b.refreshSRV(ctx); err != nil && ctx.Err() == nil {
		b.log.Warn("memcache SRV refresh failed", "srv", b.opts.SRV, "err", err)
	}
}

// refreshSRV looks the record up and replaces the server list.
func (b *Backend) refreshSRV(ctx context.Context) error {
	if _, err := parseSRVName(b.opts.SRV); err != nil {
		return err
	}
	r := b.opts.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, recs, err := r.LookupSRV(lctx, "", "", b.opts.SRV)
	if err != nil {
		return fmt.Errorf("lookup: %w", err)
	}
	if len(recs) == 0 {
		return errors.New("lookup: no records")
	}
	servers := make([]string, len(recs))
	for i, rec := range recs {
		servers[i] = net.JoinHostPort(strings.TrimSuffix(rec.Target, "."), strconv.Itoa(int(rec.Port)))
	}
	if err := b.servers.SetServers(servers...); err != nil {
		return fmt.Errorf("set servers %v: %w", servers, err)
	}
	return nil
}

// Close stops taking batches, waits (at most DrainTimeout) for the queued
// increments, stops the background loops and closes the connections. It
// reports increments it had to drop. Later calls return the first result.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		// Batches already past the closed check finish queueing; the workers
		// keep draining, so they cannot block for long.
		b.inflight.Wait()
		close(b.jobs)
		t := time.NewTimer(b.opts.DrainTimeout)
		select {
		case <-b.workersDone:
			t.Stop()
		case <-t.C:
			close(b.abort)
			<-b.workersDone
		}
		b.cancelBG()
		b.bgDone.Wait()
		b.failed.Close()
		if err := b.client.Close(); err != nil {
			b.closeErr = fmt.Errorf("memcache: close connections: %w", err)
		}
		if n := b.stats.dropped.Load(); n > 0 {
			b.closeErr = errors.Join(b.closeErr, fmt.Errorf("memcache: close: %d queued increments dropped after %s", n, b.opts.DrainTimeout))
		}
	})
	return b.closeErr
}

// keyRef names a cache key in an error without its text: keys hold
// descriptor values (user ids, API keys, addresses), and errors reach
// logs. The hash prefix tells keys apart and matches a key an operator
// computes: echo -n KEY | sha256sum.
func keyRef(key string) string {
	h := sha256.Sum256([]byte(key))
	return fmt.Sprintf("key sha256:%x (%d bytes)", h[:6], len(key))
}
