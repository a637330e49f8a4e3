package rlqssim

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Client is which of Envoy's rate_limit_quota clients an Envoy runs; they
// differ in what a server must plan for (see ../../../shared/spec/envoy-rlqs.md).
type Client int

const (
	// Global is the newest global client (global_client_impl.cc): one
	// stream per filter config, reports on a timer hard-coded to 5 s,
	// time_elapsed truncated to whole seconds, an equal token bucket kept
	// with its tokens, a replaced one started at the old one's fill ratio.
	Global Client = iota
	// GlobalOlder is the older global client: as Global, but a replaced
	// token bucket starts full.
	GlobalOlder
	// PerWorker is the per-worker client (client_impl.cc): each worker's
	// own stream, reports every reporting_interval (with every bucket,
	// the new one's included, at its first request), time_elapsed to the
	// nanosecond, and a new full token bucket on every assignment, equal
	// renewals included.
	PerWorker
)

func (c Client) String() string {
	switch c {
	case Global:
		return "global"
	case GlobalOlder:
		return "global-older"
	case PerWorker:
		return "per-worker"
	}
	return fmt.Sprintf("Client(%d)", int(c))
}

// ParseClient reads a Client name.
func ParseClient(s string) (Client, error) {
	for c := Global; c <= PerWorker; c++ {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("rlqssim: client %q (want global, global-older or per-worker)", s)
}

// GlobalReportPeriod is the newest global client's report timer: Envoy
// hard-codes it (filter_persistence.cc), whatever reporting_interval says.
const GlobalReportPeriod = 5 * time.Second

// Behaviors are a bucket's settings (RateLimitQuotaBucketSettings) as the
// filter acts on them.
type Behaviors struct {
	// NoAssignment is no_assignment_behavior's blanket rule (the zero
	// value, ALLOW_ALL, is the filter's default). A token bucket there is
	// refused: upstream builds no limiter for it and crashes.
	NoAssignment Strategy
	// Fallback and FallbackFor are expired_assignment_behavior with
	// fallback_rate_limit and its timeout: what an expired assignment
	// falls back to, and for how long. Nil: none, which is also what
	// reuse_last_assignment gets (Envoy does not implement it): an
	// expired assignment goes straight to NoAssignment.
	Fallback    *Strategy
	FallbackFor time.Duration
	// ReportingInterval is the buckets' reporting_interval: the per-worker
	// client's report timer (the global clients ignore it).
	ReportingInterval time.Duration
}

// Validate refuses what the filter refuses (or crashes on).
func (b Behaviors) Validate() error {
	if b.NoAssignment.Kind == TokenBucket {
		return fmt.Errorf("rlqssim: a token bucket as no_assignment_behavior gets no limiter in Envoy (it crashes): use a blanket rule")
	}
	if b.Fallback != nil {
		if err := b.Fallback.Validate(); err != nil {
			return fmt.Errorf("rlqssim: fallback: %w", err)
		}
		if b.FallbackFor < 0 {
			return fmt.Errorf("rlqssim: negative fallback timeout %v", b.FallbackFor)
		}
	}
	if b.ReportingInterval != 0 && b.ReportingInterval <= 100*time.Millisecond {
		return fmt.Errorf("rlqssim: reporting_interval %v, Envoy wants more than 100ms", b.ReportingInterval)
	}
	return nil
}

// Usage is one bucket's part of a report (bucket is an index into the
// fleet's buckets).
type Usage struct {
	Bucket          int
	Elapsed         time.Duration
	Allowed, Denied uint64
}

// Action is one bucket action as it reaches the filter.
type Action struct {
	Bucket  int // -1: not a bucket of the fleet
	Abandon bool
	// Strategy, its fill_interval nanos (Envoy's equality looks at them)
	// and the TTL's whole seconds, for an assignment.
	Strategy  Strategy
	FillNanos int32
	TTL       time.Duration
}

// tokenBucket is Envoy's token bucket: continuously refilled at rate,
// holding at most max, a request taking one whole token. The global
// client's is AtomicTokenBucketImpl (global_client_impl.cc), exactly
// that. The per-worker client's is TokenBucketImpl (client_impl.cc), whose
// consume refills only a bucket that is not full and only then moves its
// last fill time: a new bucket's first request finds it full and leaves
// the time since it was made uncounted, and its second request is
// credited that time too, up to one token more than max_tokens at once
// (legacy).
type tokenBucket struct {
	max, rate, tokens float64
	last              time.Time
	legacy            bool
}

func (tb *tokenBucket) fill(now time.Time) {
	if el := now.Sub(tb.last); el > 0 {
		tb.tokens = math.Min(tb.max, tb.tokens+el.Seconds()*tb.rate)
		tb.last = now
	}
}

func (tb *tokenBucket) take(now time.Time) bool {
	if !tb.legacy || tb.tokens < tb.max {
		tb.fill(now) // the legacy bucket's last fill stays while it is full
	}
	if tb.tokens >= 1 {
		tb.tokens--
		return true
	}
	return false
}

// minFillRate is Envoy's least token bucket rate (kMinFillRate): a bucket
// of rate 0 still refills, once a year.
const minFillRate = 1.0 / (365 * 24 * 60 * 60)

// cached is one bucket in the filter's cache.
type cached struct {
	// action is the assignment (or fallback) in force; nil: the default
	// action (NoAssignment).
	action *received
	tb     *tokenBucket
	// expires is when the action's TTL ends (receipt + TTL seconds), and
	// fallbackEnds when the fallback's timeout does.
	expires, fallbackEnds time.Time
	inFallback            bool
	allowed, denied       uint64
	lastReport            time.Time
	// assigned: an assignment has come since the bucket was created.
	assigned bool
}

// Filter is one Envoy's rate_limit_quota filter (one stream's worth: a
// per-worker Envoy is one Filter per worker): its bucket cache, by bucket
// index. Its transitions in time are applied at the instant they were
// due, so any clock drives it. Not safe for concurrent use.
type Filter struct {
	client  Client
	bh      Behaviors
	buckets map[int]*cached
	// OnLapse, when set, is told when an assignment (or its fallback)
	// ends and the bucket falls to the default action.
	OnLapse func(bucket int, at time.Time)
}

// NewFilter is an empty filter.
func NewFilter(client Client, bh Behaviors) *Filter {
	return &Filter{client: client, bh: bh, buckets: map[int]*cached{}}
}

// ReportPeriod is how often the filter reports.
func (f *Filter) ReportPeriod() time.Duration {
	if f.client == PerWorker && f.bh.ReportingInterval > 0 {
		return f.bh.ReportingInterval
	}
	return GlobalReportPeriod
}

// Tracked reports whether bucket i is in the cache.
func (f *Filter) Tracked(i int) bool { _, ok := f.buckets[i]; return ok }

// Len is how many buckets the filter tracks.
func (f *Filter) Len() int { return len(f.buckets) }

// advance applies what expired by now.
func (f *Filter) advance(i int, b *cached, now time.Time) {
	if b.action != nil && !b.inFallback && !now.Before(b.expires) {
		if fb := f.bh.Fallback; fb != nil {
			b.inFallback, b.fallbackEnds = true, b.expires.Add(f.bh.FallbackFor.Truncate(time.Second))
			r := received{Strategy: *fb}
			f.setBucket(b, r, b.expires)
			b.action = &r
		} else {
			b.action, b.tb = nil, nil
			if f.OnLapse != nil {
				f.OnLapse(i, b.expires)
			}
		}
	}
	if b.inFallback && !now.Before(b.fallbackEnds) {
		b.action, b.tb, b.inFallback = nil, nil, false
		if f.OnLapse != nil {
			f.OnLapse(i, b.fallbackEnds)
		}
	}
}

// setBucket makes r's token bucket the one enforced, as the client does:
// an equal one (Envoy's equality) keeps the bucket and its tokens (not on
// the per-worker client); another one starts full, or, on the newest
// client, at the old bucket's fill ratio.
func (f *Filter) setBucket(b *cached, r received, now time.Time) {
	if r.Kind != TokenBucket {
		b.tb = nil
		return
	}
	if f.client != PerWorker && b.action != nil && b.action.Kind == TokenBucket && b.tb != nil && b.action.sameBucket(r) {
		return
	}
	rate := float64(r.TokensPerFill)
	if secs := r.FillInterval.Truncate(time.Second).Seconds(); secs > 0 {
		rate /= secs
	} else {
		rate = math.Inf(1)
	}
	tb := &tokenBucket{max: float64(r.MaxTokens), rate: math.Max(rate, minFillRate), tokens: float64(r.MaxTokens), last: now,
		legacy: f.client == PerWorker}
	if f.client == Global && b.tb != nil && b.tb.max > 0 {
		b.tb.fill(now)
		tb.tokens = math.Floor(tb.max * (b.tb.tokens / b.tb.max))
	}
	b.tb = tb
}

// allow decides a request by the action in force.
func (f *Filter) allow(b *cached, now time.Time) bool {
	s := f.bh.NoAssignment
	if b.action != nil {
		s = b.action.Strategy
	}
	switch s.Kind {
	case AllowAll:
		return true
	case DenyAll:
		return false
	}
	return b.tb.take(now)
}

// Request decides one request matched into bucket i at now. The first
// request into an untracked bucket creates it (no assignment: the default
// action decides) and returns the report the client sends at once: the
// global clients that bucket alone, the per-worker client every bucket.
func (f *Filter) Request(i int, now time.Time) (allowed bool, subscribe []Usage) {
	b, ok := f.buckets[i]
	if !ok {
		b = &cached{lastReport: now}
		f.buckets[i] = b
	}
	f.advance(i, b, now)
	allowed = f.allow(b, now)
	if allowed {
		b.allowed++
	} else {
		b.denied++
	}
	if ok {
		return allowed, nil
	}
	if f.client == PerWorker {
		return allowed, f.Report(now, i)
	}
	return allowed, []Usage{f.usage(i, b, now)}
}

func (f *Filter) usage(i int, b *cached, now time.Time) Usage {
	el := now.Sub(b.lastReport)
	if f.client != PerWorker {
		el = el.Truncate(time.Second)
	}
	u := Usage{Bucket: i, Elapsed: max(el, 0), Allowed: b.allowed, Denied: b.denied}
	b.allowed, b.denied, b.lastReport = 0, 0, now
	return u
}

// Report is the periodic report: every tracked bucket, its counts reset
// (the per-worker client gives a bucket created just now an elapsed time
// of zero). Empty when nothing is tracked: the global client then sends
// a report with the domain alone.
func (f *Filter) Report(now time.Time, fresh ...int) []Usage {
	idx := make([]int, 0, len(f.buckets))
	for i := range f.buckets {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := make([]Usage, 0, len(idx))
	for _, i := range idx {
		b := f.buckets[i]
		f.advance(i, b, now)
		u := f.usage(i, b, now)
		for _, n := range fresh {
			if n == i {
				u.Elapsed = 0
			}
		}
		out = append(out, u)
	}
	return out
}

// Apply applies a response's actions in order, as the client does, and
// returns how many it ignored (for a bucket it does not track).
func (f *Filter) Apply(acts []Action, now time.Time) (ignored int) {
	for _, a := range acts {
		b, ok := f.buckets[a.Bucket]
		if a.Bucket < 0 || !ok {
			ignored++
			continue
		}
		f.advance(a.Bucket, b, now)
		if a.Abandon {
			delete(f.buckets, a.Bucket)
			continue
		}
		r := received{Strategy: a.Strategy, fillNanos: a.FillNanos}
		if b.action != nil && b.inFallback {
			// The fallback's bucket is what an equal assignment compares
			// against, as Envoy's cached action is the fallback then.
			b.inFallback = false
		}
		f.setBucket(b, r, now)
		b.action = &r
		b.assigned = true
		b.expires = now.Add(a.TTL.Truncate(time.Second))
	}
	return ignored
}

// Unassigned reports whether bucket i has had no assignment since it was
// created: its requests are decided by no_assignment_behavior alone, the
// Envoy's own setting, until the server's first answer arrives (on a
// starved machine that can take most of a second).
func (f *Filter) Unassigned(i int) bool {
	b, ok := f.buckets[i]
	return ok && !b.assigned
}

// Reset drops every bucket: the Envoy restarted.
func (f *Filter) Reset() { clear(f.buckets) }

// State is what the filter enforces on bucket i at now, for tests and
// traces: "untracked", "default", "assigned", "fallback".
func (f *Filter) State(i int, now time.Time) string {
	b, ok := f.buckets[i]
	if !ok {
		return "untracked"
	}
	f.advance(i, b, now)
	switch {
	case b.action == nil:
		return "default"
	case b.inFallback:
		return "fallback"
	}
	return "assigned"
}

// bucketKey names a BucketId independently of its map's order (Envoy
// treats {a, b} and {b, a} as one bucket).
func bucketKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for _, k := range keys {
		sb.WriteString(k)
		sb.WriteByte(0)
		sb.WriteString(m[k])
		sb.WriteByte(0)
	}
	return sb.String()
}
