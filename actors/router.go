package actors

// How an increment flows through a shard (one goroutine at a time per shard,
// which protoactor guarantees, so shard state needs no locks):
//
//  1. Router.Increment groups the request's ops by shard (xxhash(key) % N) and
//     sends each shard one incrementMsg. Every item carries the caller's reply
//     channel (buffered for all of its items, so nobody ever blocks on it).
//     Shards use protoactor's synchronized dispatcher: the sender that finds
//     a shard's mailbox idle runs its Receive, so a message costs no
//     goroutine hop; Receive never blocks, so nobody is held long.
//  2. The shard appends the items to the pending batch of their backend (main,
//     or per-second for SECOND rules when configured). While fewer than
//     MaxInFlight calls of that backend are out it flushes at once, so at
//     low load a decision costs one round trip (ParallelMin, set above 1,
//     makes a small batch wait while any call is out). Once they are all
//     out, what arrives waits and leaves with the next call as soon as one
//     returns (group commit). So the batch size follows the load, with no
//     timer on the hot path.
//     While a decision announced by Expect (a batch of requests the gRPC
//     server read together, being decoded) has not sent, new arrivals
//     wait, so that batches read at about the same time leave in one
//     call instead of the first alone and the rest after its round trip.
//     A call returning sends everything regardless, and a shard held for
//     longer than Hold sends with the next message.
//  3. A flush coalesces equal keys of one kind (N hits on one key = one
//     INCRBY N; N reads of one key = one GET; token bucket steps are never
//     merged, they keep their arrival order) and makes ONE backend call.
//     Inline backends (memory) run inside the shard; network backends run on
//     the lane's MaxInFlight long-lived workers, which answer their waiters
//     themselves and then tell the shard to flush what has piled up.
//  4. Each waiter gets its own count, as if the increments had been applied in
//     arrival order: the key's total before the batch plus the hits of the
//     waiters ahead of it.
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
	// backend (each on a worker of its own); see ParallelMin for when more
	// than one leaves. Default 1; the server derives it from the backend's
	// connection pool so that calls never queue for a connection.
	MaxInFlight int
	// Pipeline shapes the calls to Backend; PerSecondPipeline those to
	// PerSecond. Each backend keeps its own bounds.
	Pipeline, PerSecondPipeline Pipeline
	// ParallelMin is the smallest batch (in keys) that a shard sends while
	// another call of the same backend is still out; a smaller one waits for
	// that call to return and leaves with everything that piled up behind
	// it. Default 1: a batch leaves at once while fewer than MaxInFlight
	// calls are out, and decisions pile up only behind busy calls. (A
	// minimum of 16 once saved a fifth of the CPU at 10 callers, when every
	// decision came alone; now the batches read together are held together
	// by Expect, and at 10 callers on the 2-core bench 1 makes 0.25 round
	// trips per decision against 0.22, for less waiting behind a call out.)
	ParallelMin int
	// Hold bounds how long a shard holds new arrivals for decisions
	// announced by Expect; default 250µs. A batch sends within
	// microseconds, but those of many connections may overlap without a
	// gap for as long as load lasts. It is checked when a message reaches
	// the shard, which under such load is all the time. At 50 callers
	// with 3 descriptors, bounding the hold instead by 8 completions made
	// 1.7 times the round trips, and by ParallelMin keys waiting 2.4 times.
	Hold time.Duration
	// CallTimeout bounds one backend call; default 1s.
	CallTimeout time.Duration
	Logger      *slog.Logger
}

// Validate reports the first option that cannot work.
func (o Options) Validate() error {
	switch {
	case o.Backend == nil:
		return errors.New("actors: a Backend is required")
	case o.Shards < 0 || o.MaxInFlight < 0 || o.ParallelMin < 0:
		return fmt.Errorf("actors: shards (%d), max in flight (%d) and parallel minimum (%d) must not be negative", o.Shards, o.MaxInFlight, o.ParallelMin)
	case o.CallTimeout < 0 || o.Hold < 0:
		return fmt.Errorf("actors: call timeout (%v) and hold (%v) must not be negative", o.CallTimeout, o.Hold)
	}
	if err := o.Pipeline.validate(); err != nil {
		return fmt.Errorf("actors: pipeline: %w", err)
	}
	if err := o.PerSecondPipeline.validate(); err != nil {
		return fmt.Errorf("actors: per-second pipeline: %w", err)
	}
	return nil
}

// Pipeline bounds the backend calls of one lane (main or per-second).
type Pipeline struct {
	// Window is the longest a shard holds a new batch open to let it grow
	// before sending (REDIS_PIPELINE_WINDOW); 0 sends at once.
	Window time.Duration
	// MaxKeys caps the keys of one backend call, counted before equal keys
	// are coalesced; 0 means no cap. This is the one place the limit is
	// enforced: backends send whatever batch they are given in one call.
	MaxKeys int
}

func (p Pipeline) validate() error {
	if p.Window < 0 || p.MaxKeys < 0 {
		return fmt.Errorf("window (%v) and key limit (%d) must not be negative", p.Window, p.MaxKeys)
	}
	return nil
}

// full reports whether n pending keys fill a call.
func (p Pipeline) full(n int) bool { return p.MaxKeys > 0 && n >= p.MaxKeys }

// pipeline is the bounds of lane b: 0 the main backend, 1 the per-second one.
func (o *Options) pipeline(b int) Pipeline {
	if b == 1 {
		return o.PerSecondPipeline
	}
	return o.Pipeline
}

// EnsureDefaults fills the fields left zero (shards, calls in flight, call
// timeout, hold, logger) and returns o.
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
	if o.ParallelMin == 0 {
		o.ParallelMin = 1
	}
	if o.Hold == 0 {
		o.Hold = 250 * time.Microsecond
	}
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

	// mu guards closed against in-progress sends: Increment holds it shared
	// while sending, Close takes it exclusively, so no message is sent to a
	// stopped shard (where it would be lost).
	mu       sync.RWMutex
	closed   bool
	stopping atomic.Bool

	// holds: some lane makes network calls, so decisions announced by
	// Expect are worth waiting for.
	holds bool
	// expecting counts the decisions announced by Expect that have not
	// sent their increments yet.
	expecting atomic.Int32

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
		s.backends[0] = o.Backend(i)
		if o.PerSecond != nil {
			s.backends[1] = o.PerSecond(i)
		}
		for b, backend := range s.backends {
			if backend != nil && !isInline(backend) {
				s.work[b] = make(chan backendCall, o.MaxInFlight)
				r.holds = true
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
		for b, w := range s.work {
			if w == nil {
				continue // inline backend, or no per-second lane
			}
			for range o.MaxInFlight {
				r.workers.Add(1)
				go r.worker(s, b, pid)
			}
		}
	}
	return r, nil
}

// Holds reports whether Expect changes anything: some lane makes network
// calls.
func (r *Router) Holds() bool { return r.holds }

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
	op    *engine.Increment
	reply chan<- error
}

// incrementMsg is one decision's items for one shard.
type incrementMsg struct{ items []item }

// call is what one Increment needs, pooled: a decision would otherwise
// allocate a channel, its messages, their items and a timer. The messages
// and items are reused only once every answer has arrived, that is once the
// shards are done with them; a call given up on is dropped instead.
type call struct {
	reply chan error
	msg   incrementMsg
	one   [1]item
	timer *time.Timer
	// For requests that touch several shards (sendGrouped).
	msgs  []incrementMsg
	items []item
	shard []int
}

var calls = sync.Pool{New: func() any { return &call{reply: make(chan error, 4)} }}

// WaitBound implements engine.WaitBounder: Increment answers within the call
// timeout, so the engine need not set a deadline of its own.
func (r *Router) WaitBound() time.Duration { return r.o.CallTimeout }

// Increment implements engine.Counter. It returns within the call timeout
// (context.DeadlineExceeded) even if a backend call hangs.
func (r *Router) Increment(ctx context.Context, ops []engine.Increment) error {
	if len(ops) == 0 {
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
		return ErrClosed
	}
	if len(ops) == 1 {
		c.one[0] = item{&ops[0], c.reply}
		c.msg.items = c.one[:]
		r.system.Root.Send(r.pids[r.ShardOf(ops[0].Key)], &c.msg)
	} else {
		r.sendGrouped(ops, c)
	}
	r.mu.RUnlock()
	if r.holds {
		if e, ok := ctx.Value(expectKey{}).(*expected); ok {
			e.done()
		}
	}

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
	c.release()
	return first
}

// release returns c to the pool once every answer has arrived, without
// pointers into the request it served.
func (c *call) release() {
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
func (r *Router) sendGrouped(ops []engine.Increment, c *call) {
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
		msgs = append(msgs, incrementMsg{items: items[from:len(items):len(items)]})
		r.system.Root.Send(r.pids[sh], &msgs[len(msgs)-1])
	}
	c.items, c.msgs = items, msgs
}

// Expect announces a decision whose increments are on their way: a batch
// of requests read together from one connection, still being decoded and
// matched. Until its Increment (called with the returned context) has sent
// them, or done is called, shards with a network lane open no call for new
// arrivals, for at most Hold: decisions of other connections read
// meanwhile leave in the same call instead of the next one. done may be
// called more than once, and must be called if Increment may not be.
// Without a network lane Expect changes nothing.
func (r *Router) Expect(ctx context.Context) (context.Context, func()) {
	if !r.holds {
		return ctx, func() {}
	}
	e := &expected{r: r}
	r.expecting.Add(1)
	return context.WithValue(ctx, expectKey{}, e), e.done
}

type expectKey struct{}

// expected is one decision announced by Expect.
type expected struct {
	r    *Router
	gone atomic.Bool
}

// done counts the decision as sent; the last one lets the shards that
// waited for it send.
func (e *expected) done() {
	if e.gone.Swap(true) || e.r.expecting.Add(-1) > 0 {
		return
	}
	r := e.r
	runtime.Gosched()
	if r.expecting.Load() > 0 {
		return
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return
	}
	for i, s := range r.shards {
		if s.pending.Load() > 0 {
			r.system.Root.Send(r.pids[i], expectDone{})
		}
	}
}

// expectDone tells a shard that no announced decision is on its way.
type expectDone struct{}

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
