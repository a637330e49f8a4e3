package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/engine/stats"
)

// Rules is what the service needs of the engine: the rule of a bucket's
// descriptor, and the config it came from (a new one is a reload).
type Rules interface {
	QuotaRule(domain string, entries []engine.Entry) (engine.QuotaRule, bool, error)
	Config() *engine.Config
}

// Action is one BucketAction for a stream: an assignment of Strategy for
// TTL, or, when Abandon, abandon_action.
type Action struct {
	// Key names the bucket: a later action for the same Key supersedes an
	// earlier one not yet written.
	Key      string
	Bucket   alloc.BucketID
	Abandon  bool
	Strategy alloc.Strategy
	TTL      time.Duration
	// Replace is true for an assignment that replaces the Envoy's bucket:
	// the old one is counted until the Envoy is known to have this one
	// (Stream.Acked, or a later report).
	Replace bool
	// At is when it was decided (the service's clock).
	At time.Time
}

// Sink takes a stream's actions; Push must not block (the stream's
// transport queues them and writes them in order).
type Sink interface{ Push([]Action) }

// Usage is one bucket's part of a usage report.
type Usage struct {
	Bucket  alloc.BucketID
	Elapsed time.Duration
	Allowed uint64
	Denied  uint64
}

// ErrClosed is returned by Stream.Report once the service has stopped.
var ErrClosed = errors.New("rlqs: the quota service has stopped")

// Service serves the Rate Limit Quota Service's streams of one replica.
type Service struct {
	o       Options
	rules   Rules
	counter engine.Counter
	board   Board
	st      metrics
	shards  []*shard
	manual  bool

	nextID    atomic.Uint64
	streams   atomic.Int64
	reporters atomic.Int64

	mu     sync.Mutex // closing
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

// New starts a service that counts on counter (the one RLS decisions
// count through, so that both share the limits) and, when board is not
// nil, shares its claims with the other replicas through it. Close stops
// it.
func New(o Options, rules Rules, counter engine.Counter, board Board, st *stats.Store) (*Service, error) {
	s, err := newService(o, rules, counter, board, st, false)
	if err != nil {
		return nil, err
	}
	for _, sh := range s.shards {
		s.wg.Add(1)
		go sh.loop()
	}
	return s, nil
}

// NewManual is a service without goroutines, for simulations on a clock
// of their own: reports are served as they are made, store calls are made
// on the caller's goroutine, and Advance serves what is due by a time.
func NewManual(o Options, rules Rules, counter engine.Counter, board Board, st *stats.Store) (*Service, error) {
	return newService(o, rules, counter, board, st, true)
}

func newService(o Options, rules Rules, counter engine.Counter, board Board, st *stats.Store, manual bool) (*Service, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if st == nil {
		st = stats.NewStore()
	}
	s := &Service{o: o, rules: rules, counter: counter, board: board, st: newMetrics(st), manual: manual,
		stop: make(chan struct{})}
	s.shards = make([]*shard, o.Shards)
	for i := range s.shards {
		s.shards[i] = newShard(s, i)
	}
	return s, nil
}

// Advance serves, at now, every bucket due by then (manual services).
func (s *Service) Advance(now time.Time) {
	for _, sh := range s.shards {
		sh.serveDue(now, math.MaxInt)
		sh.finish(now)
	}
}

// NextDue is when a bucket of a manual service is next due (zero: none).
func (s *Service) NextDue() time.Time {
	var next time.Time
	for _, sh := range s.shards {
		if at, ok := sh.due.peek(); ok && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// Close stops serving. Reservations stay counted: the Envoys keep their
// assignments until they expire, and what they admit meanwhile was paid
// for when they were sent.
func (s *Service) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	s.wg.Wait()
}

// Drain gives back, before a graceful stop, what this replica holds
// beyond what its Envoys may spend until they reach another replica: the
// transport ends every stream (UNAVAILABLE), and an Envoy reopens its
// stream at its next report timer, so what it was sent here is counted
// for a report period, a delivery and the margin more, not to its TTL.
// An Envoy that then reaches no replica keeps enforcing what it has until
// its TTL: what happens when sluice is unreachable is the Envoy's own
// fallback. Call it once the streams have ended; it waits for the store
// calls within ctx.
func (s *Service) Drain(ctx context.Context) {
	if s.manual {
		for _, sh := range s.shards {
			sh.drain(s.o.Clock())
		}
		return
	}
	done := make([]chan struct{}, len(s.shards))
	for i, sh := range s.shards {
		done[i] = make(chan struct{})
		if !sh.post(ctx, msg{kind: msgDrain, done: done[i]}) {
			return
		}
	}
	for _, d := range done {
		select {
		case <-d:
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		}
	}
}

// Stream is one StreamRateLimitQuotas call: its reports come in through
// Report, its actions go out through its Sink. One goroutine (the
// stream's owner) calls Report and Close; Acked may be called from another,
// while Report waits for room in a shard, but never after Close.
type Stream struct {
	s      *Service
	id     uint64
	sink   Sink
	domain string
	closed atomic.Bool // read by the shards too
	// info is what the reports showed of the Envoy so far.
	info streamInfo
	// lastPeriodic is when the last periodic report came; gaps the times
	// between the last few.
	lastPeriodic time.Time
	gaps         [4]time.Duration
	ngaps        int
	// touched marks the shards holding a bucket of the stream (set by
	// Report, read by Acked in another goroutine).
	touched []atomic.Bool
	// buckets counts the stream's reporters (MaxBuckets).
	buckets atomic.Int64
	// refusedAt is when refused buckets were last answered, all of them.
	refusedAt int64
	// chunks are the reports' parts per shard, reused.
	chunks [][]usageAt
}

// streamInfo is what a stream's reports showed of its Envoy.
type streamInfo struct {
	// period is how often it reports (0: not yet known).
	period time.Duration
	// refill: an equal renewal may refill its bucket (true until a report
	// shows the newest client's whole-second time_elapsed).
	refill bool
}

// Open registers a new stream whose actions go to sink.
func (s *Service) Open(sink Sink) *Stream {
	st := &Stream{s: s, id: s.nextID.Add(1), sink: sink, info: streamInfo{refill: true},
		touched: make([]atomic.Bool, len(s.shards)), chunks: make([][]usageAt, len(s.shards))}
	s.st.streams.Set(s.streams.Add(1))
	return st
}

// Acked tells the service that every action pushed to the stream at or
// before upTo (their At) has reached the Envoy by at: its connection read
// them (an HTTP/2 PING written behind them was answered). A bucket they
// replaced stops counting a delivery later, instead of at the Envoy's
// next report. Not after Close; a stream whose transport cannot tell
// (grpc-go's server) never calls it.
//
// It never waits: where the stream's lane is full (its Report is handing
// a large report over), the acknowledgement is dropped there. The next
// one covers everything before it, and without one the Envoy's next
// report confirms the cuts; a transport loop waiting here wrote nothing
// meanwhile (the native server's tail at 50 Envoys × 1,000 buckets).
func (st *Stream) Acked(upTo, at time.Time) {
	s := st.s
	for i := range st.touched {
		if st.touched[i].Load() {
			s.shards[i].offer(msg{kind: msgAck, st: st, at: at, upTo: upTo, light: st.light()})
		}
	}
}

// ID is the stream's number, unique in the service.
func (st *Stream) ID() uint64 { return st.id }

// usageAt is one bucket's usage as a shard gets it.
type usageAt struct {
	key string // domain and BucketId
	Usage
}

// maxChunk bounds the usages in one message to a shard, so that one
// large report does not hold a shard from others' for long.
const maxChunk = 64

// keptChunk is the largest scratch per shard a stream keeps between its
// reports.
const keptChunk = 4 * maxChunk

// Report takes one RateLimitQuotaUsageReports message received at now.
// domain must be set in the first and may not change. The error names what
// is wrong with the message; nothing of a bad message is taken.
func (st *Stream) Report(now time.Time, domain string, usages []Usage) error {
	if err := checkUsages(usages); err != nil {
		return err
	}
	s := st.s
	switch {
	case s.isClosed():
		return ErrClosed
	case st.closed.Load():
		return errors.New("rlqs: report on a closed stream")
	case st.domain == "" && domain == "":
		return errors.New("rlqs: the first usage report of a stream must name its domain")
	case st.domain != "" && domain != "" && domain != st.domain:
		return fmt.Errorf("rlqs: usage report for domain %q on a stream of domain %q", domain, st.domain)
	}
	opening := st.domain == "" // no report was taken yet
	if opening {
		st.domain = domain
	}
	periodic := st.learn(now, usages)
	s.st.reports.Add(uint64(len(usages)))
	sweep := false
	if last := st.refusedAt; (last == 0 && periodic) || (last != 0 && now.UnixNano()-last >= int64(s.o.RefusedTTL/2)) {
		sweep, st.refusedAt = true, now.UnixNano()
	}
	for i := range st.chunks {
		st.chunks[i] = st.chunks[i][:0]
	}
	// Young buckets first: a usage over less than MinElapsed is a bucket
	// the Envoy has just made (its immediate report, or a periodic one
	// that found it new). It has no assignment, so the Envoy applies its
	// no_assignment_behavior (ALLOW_ALL by default) until answered; the
	// others hold assignments that last past the report. At the end of a
	// 1,000-bucket report it waited for every chunk before it.
	for _, young := range [2]bool{true, false} {
		for _, u := range usages {
			if (u.Elapsed < alloc.MinElapsed) != young {
				continue
			}
			key := st.domain + "\x00" + string(u.Bucket)
			i := s.shardOf(key)
			st.chunks[i] = append(st.chunks[i], usageAt{key: key, Usage: u})
		}
	}
	ctx := context.Background()
	send := func(i int, us []usageAt) bool {
		part := make([]usageAt, len(us))
		copy(part, us)
		st.touched[i].Store(true)
		return s.shards[i].post(ctx, msg{kind: msgReport, st: st, at: now, info: st.info, sweep: sweep, opening: opening, usages: part})
	}
	// A shard's few young buckets go first, in a message of their own on
	// every shard before the rest on any: the small report the Envoy's
	// immediate report of a new bucket would have been, which a shard
	// takes and serves between a backlog's hubs (express.go). In the
	// 64-usage chunk of a large report it waited for the shard to finish
	// whatever it was serving (the native server's acknowledgements'
	// confirmations under load: p50 1.2 s). A flood's subscriptions are
	// all young, and go as the rest do.
	for i, c := range st.chunks {
		if y := fewYoung(c); y > 0 && !send(i, c[:y]) {
			return ErrClosed
		}
	}
	for i, c := range st.chunks {
		if cap(c) > keptChunk {
			// Not kept for the next report: a stream that subscribed its
			// thousand buckets at once would hold the scratch for good
			// (64 MB over a flood's thousand streams); reports after the
			// first are what keptChunk is sized for.
			st.chunks[i] = nil
		}
		for c = c[fewYoung(c):]; len(c) > 0; {
			n := min(len(c), maxChunk)
			if !send(i, c[:n]) {
				return ErrClosed
			}
			c = c[n:]
		}
	}
	return nil
}

// fewYoung is how many young usages a shard's part of a report begins
// with, when they are few enough to go on their own (Report): at most
// expressUsages, else none.
func fewYoung(c []usageAt) int {
	y := 0
	for y < len(c) && y <= expressUsages && c[y].Elapsed < alloc.MinElapsed {
		y++
	}
	if y > expressUsages {
		return 0
	}
	return y
}

// shardOf is the shard owning a bucket's hub (key: domain and BucketId).
func (s *Service) shardOf(key string) int {
	return int(xxhash.Sum64String(key) % uint64(len(s.shards)))
}

// learn updates what the reports show of the Envoy: how often it reports
// (the longest of the last gaps between periodic reports; a new bucket's
// first report comes between two), and whether it is the newest client
// (time_elapsed in whole seconds; the per-worker client sends it to the
// nanosecond).
func (st *Stream) learn(now time.Time, usages []Usage) (periodic bool) {
	whole := true
	for _, u := range usages {
		if u.Elapsed >= alloc.MinElapsed {
			periodic = true
		}
		if u.Elapsed%time.Second != 0 {
			whole = false
		}
	}
	switch {
	case !whole:
		st.info.refill = true
	case periodic:
		st.info.refill = false
	}
	if !periodic {
		return false
	}
	if !st.lastPeriodic.IsZero() {
		st.gaps[st.ngaps%len(st.gaps)] = now.Sub(st.lastPeriodic)
		st.ngaps++
		p := time.Duration(0)
		for _, g := range st.gaps[:min(st.ngaps, len(st.gaps))] {
			p = max(p, g)
		}
		st.info.period = min(max(p, alloc.MinReportPeriod), maxPeriod)
	}
	st.lastPeriodic = now
	return true
}

// maxPeriod bounds the report period a stream is taken to have.
const maxPeriod = time.Minute

func checkUsages(usages []Usage) error {
	for i, u := range usages {
		if u.Bucket == "" {
			return fmt.Errorf("rlqs: bucket_quota_usages[%d]: bucket_id has no entries", i)
		}
		for k, v := range u.Bucket.All() {
			if k == "" || v == "" {
				return fmt.Errorf("rlqs: bucket_quota_usages[%d]: bucket_id entry %q: %q has an empty key or value", i, k, v)
			}
		}
		if u.Elapsed < 0 {
			return fmt.Errorf("rlqs: bucket_quota_usages[%d]: negative time_elapsed %v", i, u.Elapsed)
		}
	}
	return nil
}

// Close ends the stream: its Envoy may still enforce what it was sent, so
// its reporters stay counted, as ghosts, until their assignments end.
func (st *Stream) Close() {
	if st.closed.Swap(true) {
		return
	}
	s := st.s
	s.st.streams.Set(s.streams.Add(-1))
	for i := range st.touched {
		if st.touched[i].Load() {
			s.shards[i].post(context.Background(), msg{kind: msgClose, st: st, at: s.o.Clock(), light: st.light()})
		}
	}
}

// light reports whether the stream tracks few buckets: its ack or close
// touches few, and is taken as a small report is (express), so that it
// does not hold the stream's next report back while the store is behind.
func (st *Stream) light() bool { return st.buckets.Load() <= expressBuckets }

func (s *Service) isClosed() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}
