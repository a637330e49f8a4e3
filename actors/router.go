package actors

// How counter operations flow through a shard (one goroutine at a time per
// shard, which protoactor guarantees, so shard state needs no locks):
//
//  1. Router.Apply groups a decision's operations by shard
//     (xxhash(key) % N) and sends each shard one applyMsg. Every item
//     carries the caller's reply channel (buffered for all of its items, so
//     nobody ever blocks on it). Shards use protoactor's synchronized
//     dispatcher: the sender that finds a shard's mailbox idle runs its
//     Receive, so a message costs no goroutine hop; Receive never blocks,
//     so nobody is held long.
//  2. The shard appends the items to the pending operations of their lane
//     (main backend, or per-second for SECOND rules when configured), and
//     the lane decides what to do next (nextStep, a function of its state
//     alone). While fewer than MaxInFlight calls of the lane are out it
//     sends at once, so at low load a decision costs one round trip. Once
//     they are all out, what arrives waits and leaves with the next call
//     as soon as one returns (group commit): the call size follows the
//     load, with no timer on the hot path.
//     While a batch is open (Router.OpenBatch: requests the gRPC server
//     read together, being decoded), network lanes send nothing new, so
//     that batches read at about the same time leave in one call instead
//     of the first alone and the rest after its round trip. A call
//     returning sends everything regardless, and a shard that has held
//     for BatchPolicy.Hold sends with the next message.
//  3. A call coalesces equal keys of one kind (N hits on one key = one
//     INCRBY N; N reads of one key = one GET; token bucket steps are never
//     merged, they keep their arrival order) and is ONE backend Exec.
//     Inline backends (memory) run inside the shard; network backends run on
//     the lane's MaxInFlight long-lived workers, which answer their waiters
//     themselves and then tell the shard to send what has piled up.
//  4. Each waiter gets its own count, as if the operations had been
//     applied in arrival order: the key's total before the call plus the
//     hits of the waiters ahead of it.
//
// Every waiter gets an answer: the count, the backend's error, ErrClosed on
// shutdown (pending items), or ErrShardRestarted if a shard crashed.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/engine"
)

var (
	// ErrClosed answers increments that arrive at, or are still queued at, shutdown.
	ErrClosed = errors.New("rate limit counters are shutting down")
	// ErrShardRestarted answers the increments of a shard that crashed and restarted.
	ErrShardRestarted = errors.New("rate limit shard restarted; increment not applied")
)

// Options configure a Router.
type Options struct {
	// Shards is the number of shard actors; default 4 × GOMAXPROCS.
	Shards int
	// Backend returns the backend of shard i. A shared client returns the same
	// value for every i; the memory backend returns one per shard.
	Backend func(shard int) engine.Backend
	// PerSecond, when set, returns the backend for SECOND rules.
	PerSecond func(shard int) engine.Backend
	// MaxInFlight is how many backend calls a shard may have outstanding per
	// backend (each on a worker of its own); see BatchPolicy.ParallelMin
	// for when more than one leaves. Default 1; the server derives it from
	// the backend's connection pool so that calls never queue for a
	// connection.
	MaxInFlight int
	// Batch is how shards gather operations into calls and how long open
	// batches hold them.
	Batch BatchPolicy
	// CallTimeout bounds one backend call; default 1s.
	CallTimeout time.Duration
	Logger      *slog.Logger
}

// Validate reports the first option that cannot work.
func (o Options) Validate() error {
	switch {
	case o.Backend == nil:
		return errNoBackend
	case o.Shards < 0 || o.MaxInFlight < 0:
		return fmt.Errorf("actors: shards (%d) and max in flight (%d) must not be negative", o.Shards, o.MaxInFlight)
	case o.CallTimeout < 0:
		return fmt.Errorf("actors: call timeout (%v) must not be negative", o.CallTimeout)
	}
	if err := o.Batch.Validate(); err != nil {
		return fmt.Errorf("actors: %w", err)
	}
	return nil
}

// EnsureDefaults fills the fields left zero (shards, calls in flight, call
// timeout, batch policy, logger) and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.Shards == 0 {
		o.Shards = 4 * runtime.GOMAXPROCS(0)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 1
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = time.Second
	}
	o.Batch.EnsureDefaults()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// shardThroughput is how many messages a shard handles before its mailbox
// yields the goroutine draining it.
const shardThroughput = 300

// Router implements engine.Counter over shard actors.
type Router struct {
	o      Options
	system *actor.ActorSystem
	pids   []*actor.PID
	shards []*shard

	// mu guards closed against in-progress sends: Apply holds it shared
	// while sending, Close takes it exclusively, so no message is sent to a
	// stopped shard (where it would be lost).
	mu       sync.RWMutex
	closed   bool
	stopping atomic.Bool

	// network: some lane makes network calls, so open batches are worth
	// holding them for.
	network bool
	// openBatches counts the batches opened by OpenBatch and not closed.
	openBatches atomic.Int32

	workers    sync.WaitGroup // the lanes' workers (shard.work)
	callCtx    context.Context
	cancelCall context.CancelFunc
}

// New starts the shards.
func New(o Options) (*Router, error) {
	if err := o.EnsureDefaults().Validate(); err != nil {
		return nil, err
	}
	logger := o.Logger
	r := &Router{
		o: o,
		system: actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return logger.With("component", "actors")
		})),
	}
	r.callCtx, r.cancelCall = context.WithCancel(context.Background())
	for i := 0; i < o.Shards; i++ {
		s := &shard{r: r, index: i}
		s.backends[laneMain] = o.Backend(i)
		if o.PerSecond != nil {
			s.backends[lanePerSecond] = o.PerSecond(i)
		}
		for id, backend := range s.backends {
			if backend != nil && !isInline(backend) {
				s.work[id] = make(chan backendCall, o.MaxInFlight)
				r.network = true
			}
		}
		r.shards = append(r.shards, s)
		// The synchronized dispatcher runs a shard's messages on the
		// goroutine that sent them (whoever finds the mailbox idle drains
		// it), instead of starting a goroutine each time the mailbox wakes.
		// A shard's Receive never blocks (network calls go to its
		// workers), so senders are held only for the bookkeeping.
		props := actor.PropsFromProducer(func() actor.Actor { return s },
			actor.WithDispatcher(actor.NewSynchronizedDispatcher(shardThroughput)))
		pid := r.system.Root.Spawn(props)
		r.pids = append(r.pids, pid)
		for id, w := range s.work {
			if w == nil {
				continue // inline backend, or no per-second lane
			}
			for range o.MaxInFlight {
				r.workers.Add(1)
				go r.worker(s, laneID(id), pid)
			}
		}
	}
	return r, nil
}

// Shards is the number of shards.
func (r *Router) Shards() int { return len(r.pids) }

// Pending is the number of increments queued at a shard, waiting for its
// backend call in flight to end.
func (r *Router) Pending(shard int) int { return int(r.shards[shard].pending.Load()) }

// ShardOf is the shard a cache key belongs to.
func (r *Router) ShardOf(key string) int {
	return int(xxhash.Sum64String(key) % uint64(len(r.pids)))
}

type item struct {
	op    *engine.CounterOp
	reply chan<- error
}

// applyMsg is one decision's items for one shard.
type applyMsg struct{ items []item }

// call is what one Apply needs, pooled: a decision would otherwise
// allocate a channel, its messages, their items and a timer. The messages
// and items are reused only once every answer has arrived, that is once the
// shards are done with them; a call given up on is dropped instead.
//
// The shards work on the call's own copy of the operations, never on the
// caller's: a call given up on (its context, the call timeout) returns
// while its items may still wait in a shard or a backend call, and the
// caller may read or reuse its operations at once (a lease files a failed
// direct decision, the quota service retries). Answers reach the caller's
// operations only when every one has arrived.
type call struct {
	reply chan error
	ops   []engine.CounterOp
	msg   applyMsg
	one   [1]item
	timer *time.Timer
	// For requests that touch several shards (sendGrouped).
	msgs  []applyMsg
	items []item
	shard []int
}

var calls = sync.Pool{New: func() any { return &call{reply: make(chan error, 4)} }}

// WaitBound implements engine.WaitBounder: Apply answers within the call
// timeout, so the engine need not set a deadline of its own.
func (r *Router) WaitBound() time.Duration { return r.o.CallTimeout }

// Apply implements engine.Counter. It closes batch once ops are sent, and
// returns within the call timeout (context.DeadlineExceeded) even if a
// backend call hangs.
func (r *Router) Apply(ctx context.Context, ops []engine.CounterOp, batch engine.Batch) error {
	if len(ops) == 0 {
		closeBatch(batch)
		return nil
	}
	c := calls.Get().(*call)
	if cap(c.reply) < len(ops) {
		c.reply = make(chan error, len(ops))
	}
	r.mu.RLock()
	if r.closed {
		r.mu.RUnlock()
		calls.Put(c)
		closeBatch(batch)
		return ErrClosed
	}
	c.ops = append(c.ops[:0], ops...)
	if len(ops) == 1 {
		c.one[0] = item{&c.ops[0], c.reply}
		c.msg.items = c.one[:]
		r.system.Root.Send(r.pids[r.ShardOf(ops[0].Key)], &c.msg)
	} else {
		r.sendGrouped(c.ops, c)
	}
	r.mu.RUnlock()
	closeBatch(batch)

	var first error
	armed := false
	for range ops {
		var err error
		select {
		case err = <-c.reply:
			// An inline backend (memory) has usually answered by now: no
			// timer is armed for answers already there.
		default:
			if !armed {
				armed = true
				if c.timer == nil {
					c.timer = time.NewTimer(r.o.CallTimeout)
				} else {
					c.timer.Reset(r.o.CallTimeout)
				}
			}
			select {
			case err = <-c.reply:
			case <-ctx.Done():
				// Answers still to come would land in a reused channel: drop c.
				c.timer.Stop()
				return fmt.Errorf("waiting for rate limit counters: %w", ctx.Err())
			case <-c.timer.C:
				return fmt.Errorf("waiting for rate limit counters: %w", context.DeadlineExceeded)
			}
		}
		if err != nil && first == nil {
			first = err
		}
	}
	if armed {
		c.timer.Stop()
	}
	for i := range ops {
		ops[i].After = c.ops[i].After
	}
	c.release()
	return first
}

// release returns c to the pool once every answer has arrived, without
// pointers into the request it served.
func (c *call) release() {
	clear(c.ops)
	c.ops = c.ops[:0]
	c.one[0] = item{}
	c.msg.items = nil
	clear(c.items)
	c.items = c.items[:0]
	for i := range c.msgs {
		c.msgs[i].items = nil
	}
	c.msgs = c.msgs[:0]
	calls.Put(c)
}

// sendGrouped sends one message per shard touched by ops, each listing its
// ops in request order, built in c's reusable buffers.
func (r *Router) sendGrouped(ops []engine.CounterOp, c *call) {
	shardOf := c.shard[:0]
	for i := range ops {
		shardOf = append(shardOf, r.ShardOf(ops[i].Key))
	}
	c.shard = shardOf
	// The items, grouped by shard in first-seen order, and one message per
	// shard holding a slice of them. Both have their final capacity before
	// the first send: a sent message points into them.
	items := slices.Grow(c.items[:0], len(ops))
	msgs := slices.Grow(c.msgs[:0], len(ops))
	for i := range ops {
		sh := shardOf[i]
		if sh < 0 {
			continue // sent with an earlier op of the same shard
		}
		from := len(items)
		for j := i; j < len(ops); j++ {
			if shardOf[j] == sh {
				items = append(items, item{&ops[j], c.reply})
				shardOf[j] = -1
			}
		}
		msgs = append(msgs, applyMsg{items: items[from:len(items):len(items)]})
		r.system.Root.Send(r.pids[sh], &msgs[len(msgs)-1])
	}
	c.items, c.msgs = items, msgs
}

// OpenBatch opens a batch: requests read together from one connection,
// still being decoded and matched, whose operations will follow. Until it
// is closed (by Apply as it sends them, or by its owner), shards with a
// network lane open no call for new arrivals, for at most
// BatchPolicy.Hold: decisions of other connections read meanwhile leave
// in the same call instead of the next one. Without a network lane
// nothing is held and OpenBatch returns nil.
func (r *Router) OpenBatch() engine.Batch {
	if !r.network {
		return nil
	}
	r.openBatches.Add(1)
	return &batch{r: r}
}

// batch is one batch opened by OpenBatch.
type batch struct {
	r      *Router
	closed atomic.Bool
}

// Close ends b's hold; once the last open batch has closed, the shards
// that held new arrivals for them send. Later calls do nothing.
func (b *batch) Close() {
	if b.closed.Swap(true) || b.r.openBatches.Add(-1) > 0 {
		return
	}
	r := b.r
	if !r.holding() {
		// Nothing held, nothing to wake: a batch whose decisions needed
		// no call (a lease answered them) must not wait for a core
		// before its answers are written. A shard that holds an
		// arrival after this read saw no open batch and sends it, or
		// saw one opened since, whose Close wakes it.
		return
	}
	if !r.o.Batch.NoReleaseYield {
		// A batch read at the same moment on another connection may be
		// about to open: it then sends the shards' operations with its own.
		releaseYield()
		if r.openBatches.Load() > 0 {
			return
		}
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return
	}
	for i, s := range r.shards {
		if s.pending.Load() > 0 {
			r.system.Root.Send(r.pids[i], batchesClosed{})
		}
	}
}

// releaseYield is how Close gives up its core before it wakes held
// shards (a test counts the calls).
var releaseYield = runtime.Gosched

// holding reports whether a shard holds operations: read after an open
// batch count reached zero, as each shard reads that count after it
// counts what it holds, so one of the two sees the other.
func (r *Router) holding() bool {
	for _, s := range r.shards {
		if s.pending.Load() > 0 {
			return true
		}
	}
	return false
}

// batchesClosed tells a shard that no open batch holds it any more.
type batchesClosed struct{}

// closeBatch closes b, if any.
func closeBatch(b engine.Batch) {
	if b != nil {
		b.Close()
	}
}

// Close stops the shards. Queued increments are answered with ErrClosed;
// calls in flight finish (or are cancelled after the call timeout) and answer
// their own waiters. Backends are not closed: their owner closes them.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()

	r.stopping.Store(true)
	for _, pid := range r.pids {
		if err := r.system.Root.StopFuture(pid).Wait(); err != nil {
			r.o.Logger.Warn("stopping shard", "error", err)
		}
	}
	// The shards are stopped: nothing sends to the workers any more.
	for _, s := range r.shards {
		for _, w := range s.work {
			if w != nil {
				close(w)
			}
		}
	}
	done := make(chan struct{})
	go func() { r.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.o.CallTimeout):
		r.cancelCall()
		<-done
	}
	r.cancelCall()
	r.system.Shutdown()
	return nil
}
