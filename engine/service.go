package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine/stats"
)

// Counter applies counter operations. The actors package implements it by
// gathering the operations of many decisions into one backend call per
// shard; DirectCounter hands each decision's to a backend by itself.
type Counter interface {
	// Apply fills After of every op, or fails them all. batch, when not
	// nil, is the open batch whose last operations ops are: the counter
	// closes it as soon as they are sent, before it waits for their
	// answers, so that what the batch held leaves with them.
	Apply(ctx context.Context, ops []CounterOp, batch Batch) error
}

// Batch is an open batch: requests read together (the calls one read of
// a gRPC connection brought) whose counter operations are on their way.
// While a batch is open, a counter with network calls holds its calls for
// it (for a bounded time), so that the operations of batches read at about
// the same moment share one call. The one who opens a batch closes it once
// the batch is decided; the counter closes it earlier, as its operations
// are sent (Counter.Apply). Close may be called more than once.
type Batch interface{ Close() }

// closeBatch closes b, if any.
func closeBatch(b Batch) {
	if b != nil {
		b.Close()
	}
}

// DirectCounter is a Counter that sends each decision's operations straight
// to its Backend, one call per decision. It suits callers with nothing to
// gather (the OData API's in-process limiter: one request is one key) and
// tests that need the engine without the actors layer.
type DirectCounter struct{ Backend Backend }

// Apply runs ops as one backend call; it holds nothing, so it closes batch
// first.
func (c DirectCounter) Apply(ctx context.Context, ops []CounterOp, batch Batch) error {
	closeBatch(batch)
	return c.Backend.Exec(ctx, ops)
}

// WaitBounder is implemented by Counters that answer every Apply within
// WaitBound by themselves; the engine then sets no deadline of its own when
// that bound is within its Timeout (a timer and a context fewer per decision).
type WaitBounder interface {
	WaitBound() time.Duration
}

// OverLimitCache remembers keys that went over their limit, until their window
// ends, so they are answered without a backend call (LOCAL_CACHE_SIZE_IN_BYTES).
type OverLimitCache interface {
	Contains(key string) bool
	Add(key string, ttl time.Duration)
}

// HeaderOptions are the RateLimit-* response headers (LIMIT_RESPONSE_HEADERS_ENABLED).
type HeaderOptions struct {
	Enabled   bool
	Limit     string
	Remaining string
	Reset     string
}

// Options configure a Service. Zero values mean the reference's defaults
// where DefaultOptions documents one.
type Options struct {
	Counter Counter
	Stats   *stats.Store
	// Clock is the time source; tests inject one to cross windows without sleeping.
	Clock func() time.Time
	// Jitter returns a random number in [0, n); the TTL jitter source.
	Jitter func(n int64) int64

	NearLimitRatio       float32       // NEAR_LIMIT_RATIO, default 0.8
	CacheKeyPrefix       string        // CACHE_KEY_PREFIX
	ExpirationJitterMax  time.Duration // EXPIRATION_JITTER_MAX_SECONDS, default 300s
	ShadowMode           bool          // SHADOW_MODE (global)
	QuotaMode            bool          // QUOTA_MODE (global)
	DynamicMetadata      bool          // RESPONSE_DYNAMIC_METADATA
	Headers              HeaderOptions // LIMIT_RESPONSE_HEADERS_ENABLED and names
	StopIncrementOnLimit bool          // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
	LocalCache           OverLimitCache
	KeyValidator         KeyValidator
	// Timeout bounds how long a decision waits for the counters.
	Timeout time.Duration
	// BackendErrorStat names the should_rate_limit error counter of a backend
	// failure; "redis_error" as the reference, whatever the backend.
	BackendErrorStat string
}

// DefaultOptions are the reference's defaults.
func DefaultOptions() Options {
	return Options{
		NearLimitRatio:      0.8,
		ExpirationJitterMax: 300 * time.Second,
		Headers: HeaderOptions{
			Limit:     "RateLimit-Limit",
			Remaining: "RateLimit-Remaining",
			Reset:     "RateLimit-Reset",
		},
		Timeout:          time.Second,
		BackendErrorStat: "redis_error",
	}
}

// EnsureDefaults fills the fields whose zero value means "not set" (the
// statistics store, clock, jitter source and error counter name) and returns
// o. Fields whose zero is a valid setting (NEAR_LIMIT_RATIO=0, no jitter)
// take the reference's values from DefaultOptions instead.
func (o *Options) EnsureDefaults() *Options {
	if o.Stats == nil {
		o.Stats = stats.NewStore()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Jitter == nil {
		o.Jitter = rand.Int64N
	}
	if o.BackendErrorStat == "" {
		o.BackendErrorStat = "redis_error"
	}
	return o
}

// Validate reports the first setting that cannot work. It checks settings
// only, so the server validates them once, when it reads them; NewService
// also requires a Counter.
func (o Options) Validate() error {
	switch {
	case o.NearLimitRatio < 0 || o.NearLimitRatio > 1 || math.IsNaN(float64(o.NearLimitRatio)):
		return fmt.Errorf("engine: NEAR_LIMIT_RATIO must be between 0 and 1, got %v", o.NearLimitRatio)
	case o.ExpirationJitterMax < 0:
		return fmt.Errorf("engine: EXPIRATION_JITTER_MAX_SECONDS must not be negative, got %v", o.ExpirationJitterMax)
	case o.Timeout <= 0:
		return fmt.Errorf("engine: the backend timeout (SLUICE_BACKEND_TIMEOUT) must be positive, got %v", o.Timeout)
	case o.Headers.Enabled && (o.Headers.Limit == "" || o.Headers.Remaining == "" || o.Headers.Reset == ""):
		return errors.New("engine: response header names must not be empty")
	}
	return nil
}

// Service makes rate limit decisions against the current configuration.
type Service struct {
	o   Options
	cfg atomic.Pointer[Config]

	serviceError     *stats.Counter
	backendError     *stats.Counter
	globalShadowMode *stats.Counter
}

// NewService checks the options and returns a Service with no configuration;
// requests fail with ErrNoConfig until SetConfig.
func NewService(o Options) (*Service, error) {
	if err := o.EnsureDefaults().Validate(); err != nil {
		return nil, err
	}
	if o.Counter == nil {
		return nil, errors.New("engine: a Counter is required")
	}
	return &Service{
		o:                o,
		serviceError:     o.Stats.Counter("ratelimit.service.call.should_rate_limit.service_error"),
		backendError:     o.Stats.Counter("ratelimit.service.call.should_rate_limit." + o.BackendErrorStat),
		globalShadowMode: o.Stats.Counter("ratelimit.service.global_shadow_mode"),
	}, nil
}

// Stats is the store the service counts into.
func (s *Service) Stats() *stats.Store { return s.o.Stats }

// SetConfig swaps in a new configuration (nil unloads it). The statistics
// of rules the new one no longer has are released.
func (s *Service) SetConfig(c *Config) {
	if old := s.cfg.Swap(c); old != nil && old != c {
		old.releaseRemoved(c)
	}
}

// Config is the configuration in use, or nil.
func (s *Service) Config() *Config { return s.cfg.Load() }

// LoadConfig builds a Config that counts into this service's stats store.
func (s *Service) LoadConfig(files []ConfigFile, merge bool) (*Config, error) {
	return LoadConfig(files, ConfigOptions{MergeDomains: merge, Stats: s.o.Stats})
}

// MaxHitsAddend is the largest hits_addend a descriptor may carry: counters
// are signed 64-bit numbers in Redis.
const MaxHitsAddend = math.MaxInt64

// limitInfo is the per-descriptor working state of one decision.
type limitInfo struct {
	m         match
	hits      uint64
	key       string
	op        int // index into ops, -1 when no counter is involved
	localOver bool
	before    uint64
	after     uint64

	// sliding_window: prevOp reads the previous window's counter (prev).
	prevOp int
	prev   uint64
	// token_bucket: the step as the backend answered it, and the limit the
	// counts are judged against (the burst; requests_per_unit otherwise).
	bucket CounterOp
	limitN uint64
}

// decision is the memory of a request with up to three descriptors.
type decision struct {
	resp     Response
	statuses [3]DescriptorStatus
	ops      [3]CounterOp
}

// response is d's response with room for n statuses in d itself, or nil
// (respond allocates) when d is nil or they do not fit.
func (d *decision) response(n int) *Response {
	if d == nil || n > len(d.statuses) {
		return nil
	}
	d.resp.Statuses = d.statuses[:n:n]
	return &d.resp
}

// ShouldRateLimit decides one request.
func (s *Service) ShouldRateLimit(ctx context.Context, req *Request) (*Response, error) {
	return s.decideOne(ctx, req, nil)
}

// decideOne decides req; batch, if not nil, is closed once req's first
// counter operations are sent, or when it returns.
func (s *Service) decideOne(ctx context.Context, req *Request, batch Batch) (*Response, error) {
	defer closeBatch(batch)
	cfg, err := s.check(req)
	if err != nil {
		return nil, err
	}
	// A typical request has one to three descriptors: its working state lives
	// on the stack, and its response and counter operations share one allocation.
	var infoBuf [4]limitInfo
	var infos []limitInfo
	if len(req.Descriptors) <= len(infoBuf) {
		infos = infoBuf[:len(req.Descriptors)]
	} else {
		infos = make([]limitInfo, len(req.Descriptors))
	}
	var d *decision
	var ops []CounterOp
	if len(infos) <= len(d.ops) {
		d = new(decision)
		ops = d.ops[:0:len(infos)]
	} else {
		ops = make([]CounterOp, 0, len(infos))
	}
	now := s.o.Clock()
	if ops, err = s.prepare(cfg, req, infos, ops, now); err != nil {
		return nil, err
	}
	if len(ops) > 0 {
		if err := s.count(ctx, infos, ops, now, batch); err != nil {
			s.backendError.Inc()
			return nil, BackendError(err)
		}
	}
	return s.respond(req, infos, d.response(len(infos)), now), nil
}

// BatchItem is one request of ShouldRateLimitBatch: Req in, and Resp or Err
// out.
type BatchItem struct {
	Req  *Request
	Resp *Response
	Err  error
}

// ShouldRateLimitBatch decides the requests of batch (the calls a gRPC
// server read from one connection at once) as ShouldRateLimit decides
// each, with one Counter.Apply for the operations of them all: one message
// per shard, one wait, instead of one of each per request. Counts are as
// if the requests had come one after another in items' order. A request's
// own error (a bad request, an invalid key) is its alone; a counter
// failure fails every request that had operations. With
// StopIncrementOnLimit each request reads before it counts, so the
// requests are decided one per goroutine instead, and batch is closed once
// every one of them has sent its first operations. batch may be nil; it is
// closed by the time ShouldRateLimitBatch returns.
func (s *Service) ShouldRateLimitBatch(ctx context.Context, batch Batch, items []BatchItem) {
	if s.o.StopIncrementOnLimit {
		s.decideEach(ctx, batch, items)
		return
	}
	defer closeBatch(batch)
	type part struct {
		infos  []limitInfo
		lo, hi int // the request's ops
	}
	parts := make([]part, len(items))
	n := 0
	for i := range items {
		n += len(items[i].Req.Descriptors)
	}
	infos := make([]limitInfo, n)
	ops := make([]CounterOp, 0, n)
	now := s.o.Clock()
	for i := range items {
		req := items[i].Req
		cfg, err := s.check(req)
		if err != nil {
			items[i].Err = err
			continue
		}
		in := infos[:len(req.Descriptors):len(req.Descriptors)]
		infos = infos[len(req.Descriptors):]
		lo := len(ops)
		// The ops' indexes in limitInfo count from the batch's first op.
		if ops, err = s.prepare(cfg, req, in, ops, now); err != nil {
			items[i].Err = err
			ops = ops[:lo]
			continue
		}
		parts[i] = part{infos: in, lo: lo, hi: len(ops)}
	}
	var err error
	if len(ops) > 0 {
		err = s.apply(ctx, ops, batch)
	}
	// One allocation holds the responses of the requests with up to three
	// descriptors.
	ds := make([]decision, len(items))
	for i := range items {
		p := &parts[i]
		if items[i].Err != nil {
			continue
		}
		if p.hi > p.lo {
			if err != nil {
				s.backendError.Inc()
				items[i].Err = BackendError(err)
				continue
			}
			s.fill(p.infos, ops, nil)
		}
		items[i].Resp = s.respond(items[i].Req, p.infos, ds[i].response(len(p.infos)), now)
	}
}

// decideEach decides the requests of batch one per goroutine; each holds
// a part of batch, and batch closes when the last part does.
func (s *Service) decideEach(ctx context.Context, batch Batch, items []BatchItem) {
	var parts *batchParts
	if batch != nil {
		parts = &batchParts{batch: batch}
		parts.left.Store(int32(len(items)))
	}
	var wg sync.WaitGroup
	for i := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items[i].Resp, items[i].Err = s.decideOne(ctx, items[i].Req, parts.part())
		}()
	}
	wg.Wait()
	closeBatch(batch) // also when items is empty
}

// batchParts closes batch once each of its parts has closed.
type batchParts struct {
	batch Batch
	left  atomic.Int32
}

// part is one share of p, or nil when there is no batch.
func (p *batchParts) part() Batch {
	if p == nil {
		return nil
	}
	return &batchPart{p: p}
}

// batchPart is one request's share of a batch.
type batchPart struct {
	p      *batchParts
	closed atomic.Bool
}

func (b *batchPart) Close() {
	if !b.closed.Swap(true) && b.p.left.Add(-1) == 0 {
		b.p.batch.Close()
	}
}

// check validates what can be judged of req without its rules, and returns
// the configuration to judge it by.
func (s *Service) check(req *Request) (*Config, error) {
	if req.Domain == "" {
		s.serviceError.Inc()
		return nil, invalidRequest("rate limit domain must not be empty")
	}
	if len(req.Descriptors) == 0 {
		s.serviceError.Inc()
		return nil, invalidRequest("rate limit descriptor list must not be empty")
	}
	cfg := s.cfg.Load()
	if cfg == nil {
		s.serviceError.Inc()
		return nil, &requestError{kind: ErrNoConfig, msg: ErrNoConfig.Error()}
	}
	for i := range req.Descriptors {
		if l := req.Descriptors[i].Limit; l != nil && !l.Unit.Valid() {
			s.serviceError.Inc()
			return nil, invalidRequest(fmt.Sprintf("descriptor %d: limit override has an unknown unit (%d)", i, l.Unit))
		}
	}
	return cfg, nil
}

// prepare matches req's descriptors into infos (one each), counts their
// hits, and appends their counter operations to ops; each info's op and
// prevOp index ops as returned.
func (s *Service) prepare(cfg *Config, req *Request, infos []limitInfo, ops []CounterOp, now time.Time) ([]CounterOp, error) {
	for i := range req.Descriptors {
		m, found := cfg.getLimit(req.Domain, &req.Descriptors[i])
		if !found {
			// Any caller can name any domain: a bounded set of names.
			s.o.Stats.DynamicCounter("ratelimit.service.rate_limit."+stats.SanitizeName(req.Domain)+".domain_not_found",
				"ratelimit.service.rate_limit."+OverflowStatsKey+".domain_not_found").Inc()
		}
		infos[i] = limitInfo{m: m, op: -1, prevOp: -1}
	}
	dropReplaced(infos)
	for i := range infos {
		// A count must fit the backends' signed 64-bit counters (Redis INCRBY
		// takes an int64). The reference sends it anyway and writes -1; it is
		// the caller's mistake, so it is refused before anything is counted.
		if l := infos[i].m.limit; l != nil && !l.Unlimited {
			if h := hitsAddend(req, i); h > MaxHitsAddend {
				s.serviceError.Inc()
				return ops, invalidRequest(fmt.Sprintf("descriptor %d: hits_addend %d is larger than %d, the most a counter can take", i, h, uint64(MaxHitsAddend)))
			}
		}
	}

	unix := now.Unix()
	for i := range infos {
		in := &infos[i]
		l := in.m.limit
		if l == nil || l.Unlimited {
			continue
		}
		in.hits = hitsAddend(req, i)
		in.limitN = uint64(l.RequestsPerUnit)
		if l.Algorithm == TokenBucket {
			// More tokens than the bucket holds can never be admitted: an
			// OVER_LIMIT with a retry time would have the client retry
			// forever. (A bucket of 0, requests_per_unit 0, refuses
			// everything on purpose and stays an OVER_LIMIT.)
			burst := bucketBurst(l, l.RequestsPerUnit, bucketInterval(l.RequestsPerUnit, l.Unit))
			if burst > 0 && in.hits > uint64(burst) {
				s.serviceError.Inc()
				return ops, invalidRequest(fmt.Sprintf("hits_addend %d is more than the burst %d of token bucket rule '%s': it can never be admitted", in.hits, burst, l.FullKey))
			}
		}
		if l.Algorithm == TokenBucket {
			in.key = s.cacheKey(req.Domain, req.Descriptors[i].Entries, in.m.sharedValues, 0, 0)
		} else {
			in.key = s.cacheKey(req.Domain, req.Descriptors[i].Entries, in.m.sharedValues, l.Unit, unix)
		}
		if v := s.o.KeyValidator; v != nil {
			if err := v.ValidateKey(in.key); err != nil {
				s.serviceError.Inc()
				return ops, &requestError{kind: ErrInvalidRequest, msg: err.Error(), err: err}
			}
		}
		in.stats().TotalHits.Add(in.hits)
		if s.o.LocalCache != nil && s.o.LocalCache.Contains(in.key) {
			in.localOver = true
			continue
		}
		in.op = len(ops)
		perSecond := l.Unit == UnitSecond
		switch l.Algorithm {
		case SlidingWindow:
			// The counter lives one unit longer: the next window reads it.
			ttl := s.ttl(l.Unit) + time.Duration(l.Unit.Seconds())*time.Second
			ops = append(ops, CounterOp{Key: in.key, Hits: in.hits, TTL: ttl, PerSecond: perSecond})
			in.prevOp = len(ops)
			prevKey := s.cacheKey(req.Domain, req.Descriptors[i].Entries, in.m.sharedValues, l.Unit, unix-l.Unit.Seconds())
			ops = append(ops, CounterOp{Key: prevKey, Kind: OpGet, PerSecond: perSecond})
		case TokenBucket:
			interval := bucketInterval(l.RequestsPerUnit, l.Unit)
			burst := bucketBurst(l, l.RequestsPerUnit, interval)
			in.limitN = uint64(burst)
			ops = append(ops, CounterOp{Key: in.key, Hits: in.hits, Kind: OpTokenBucket, PerSecond: perSecond,
				Now: now.UnixMicro(), Interval: interval, Burst: burst})
		default:
			ops = append(ops, CounterOp{Key: in.key, Hits: in.hits, TTL: s.ttl(l.Unit), PerSecond: perSecond})
		}
	}
	return ops, nil
}

// respond judges the counted infos of req into resp (allocated if nil).
func (s *Service) respond(req *Request, infos []limitInfo, resp *Response, now time.Time) *Response {
	if resp == nil {
		resp = &Response{Statuses: make([]DescriptorStatus, len(infos))}
	}
	var failedRL, failedQuota, totalQuota int
	for i := range infos {
		st := s.decide(&infos[i], now)
		resp.Statuses[i] = st
		l := infos[i].m.limit
		if l == nil || l.Unlimited {
			continue
		}
		quota := s.o.QuotaMode || l.QuotaMode
		if quota {
			totalQuota++
			if st.Code == CodeOverLimit {
				failedQuota++
			}
		} else if st.Code == CodeOverLimit {
			failedRL++
		}
	}
	resp.OverallCode = CodeOK
	if failedRL > 0 || (totalQuota > 0 && totalQuota == failedQuota) {
		resp.OverallCode = CodeOverLimit
		if s.o.ShadowMode {
			resp.OverallCode = CodeOK
			s.globalShadowMode.Inc()
		}
	}
	if s.o.Headers.Enabled {
		resp.Headers = s.headers(infos, resp.Statuses)
	}
	if s.o.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, infos, resp.Statuses)
	}
	return resp
}

// count applies the operations. With StopIncrementOnLimit it follows the
// reference: when a key is over in the local cache, every other key is sent
// with 0 hits; otherwise every counter is first read (a fixed window's with
// OpGet, a GET that changes nothing), and if any key would go over its
// limit, only those keys are incremented and the others are sent with 0 hits.
// batch is closed as the first operations are sent.
func (s *Service) count(ctx context.Context, infos []limitInfo, ops []CounterOp, now time.Time, batch Batch) error {
	if !s.o.StopIncrementOnLimit {
		if err := s.apply(ctx, ops, batch); err != nil {
			return err
		}
		s.fill(infos, ops, nil)
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	anyLocal := false
	for i := range infos {
		anyLocal = anyLocal || infos[i].localOver
	}
	hits := make([]uint64, len(ops))
	for j := range ops {
		hits[j] = ops[j].Hits
	}
	if anyLocal {
		for j := range ops {
			ops[j].Hits = 0
		}
	} else if err := s.readFirst(ctx, infos, ops, hits, now, batch); err != nil {
		return err
	} else {
		batch = nil // closed by the reads
	}
	if err := s.o.Counter.Apply(ctx, ops, batch); err != nil {
		return err
	}
	s.fill(infos, ops, hits)
	return nil
}

// apply runs ops through the Counter within the decision timeout.
func (s *Service) apply(ctx context.Context, ops []CounterOp, batch Batch) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.o.Counter.Apply(ctx, ops, batch)
}

// bound is ctx with the decision timeout as its deadline, unless the caller's
// is sooner or the Counter bounds its own wait within it. Envoy sends its own
// (shorter) deadline with every call; bounding the wait only when it did not
// saves a timer per decision.
func (s *Service) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	bounded := false
	if wb, ok := s.o.Counter.(WaitBounder); ok {
		bounded = wb.WaitBound() <= s.o.Timeout
	}
	if dl, ok := ctx.Deadline(); !bounded && (!ok || time.Until(dl) > s.o.Timeout) {
		return context.WithTimeout(ctx, s.o.Timeout)
	}
	return ctx, func() {}
}

// readFirst reads every counter of ops (a fixed window's with OpGet, other
// algorithms' with a step of 0 hits) and, if any descriptor would go over its
// limit with its hits, sets the hits of all the others to 0.
func (s *Service) readFirst(ctx context.Context, infos []limitInfo, ops []CounterOp, hits []uint64, now time.Time, batch Batch) error {
	reads := make([]CounterOp, len(ops))
	copy(reads, ops)
	for j := range reads {
		reads[j].Hits = 0
		if reads[j].Kind == OpAdd {
			reads[j] = CounterOp{Key: ops[j].Key, Kind: OpGet, PerSecond: ops[j].PerSecond}
		}
	}
	if err := s.o.Counter.Apply(ctx, reads, batch); err != nil {
		return err
	}
	over := make([]bool, len(ops))
	anyOver := false
	for i := range infos {
		in := &infos[i]
		if in.op >= 0 && in.overIfCounted(reads, hits[in.op], now) {
			over[in.op], anyOver = true, true
		}
	}
	if anyOver {
		for j := range ops {
			if !over[j] {
				ops[j].Hits = 0
			}
		}
	}
	return nil
}

// overIfCounted reports whether adding hits to what the read-only pass of
// stop-increment mode found would put the descriptor over its limit.
func (in *limitInfo) overIfCounted(ops []CounterOp, hits uint64, now time.Time) bool {
	op := ops[in.op]
	switch in.m.limit.Algorithm {
	case TokenBucket:
		op.Hits = hits
		_, after, limit := bucketUsage(&op)
		return after > limit
	case SlidingWindow:
		w := slidingWeight(ops[in.prevOp].After, now, in.m.limit.Unit.Seconds())
		return op.After+hits+w > in.limitN
	}
	return op.After+hits > in.limitN
}

// fill copies counts back: after is the backend's count, before is after
// less the descriptor's hits. wanted (stop-increment mode) holds the hits
// each op would have carried. A fixed-window key sent with 0 hits is judged
// the reference's way: its count is what the counter holds, and before is
// after - hits in unsigned arithmetic, so below 0 it wraps (a stat then
// counts the key as already near or over, as the reference does). Other
// algorithms judge a key left alone as if its hits had been added.
func (s *Service) fill(infos []limitInfo, ops []CounterOp, wanted []uint64) {
	for i := range infos {
		in := &infos[i]
		if in.op < 0 {
			continue
		}
		op := ops[in.op]
		if in.prevOp >= 0 {
			in.prev = ops[in.prevOp].After
		}
		if op.Kind == OpTokenBucket {
			if wanted != nil && op.Hits == 0 {
				op.Hits = wanted[in.op]
			}
			in.bucket = op
			in.before, in.after, in.limitN = bucketUsage(&op)
			continue
		}
		if wanted != nil && op.Hits == 0 && in.m.limit.Algorithm == SlidingWindow {
			in.before, in.after = op.After, op.After+wanted[in.op]
			continue
		}
		in.after = op.After
		if wanted != nil {
			in.before = op.After - in.hits
			continue
		}
		in.before = op.After - min(op.After, op.Hits)
	}
}

func (in *limitInfo) stats() *RuleStats {
	if in.m.stats != nil {
		return in.m.stats
	}
	return &in.m.limit.Stats
}

// decide turns counts into a status and statistics, per the reference's
// base limiter arithmetic.
func (s *Service) decide(in *limitInfo, now time.Time) DescriptorStatus {
	l := in.m.limit
	if l == nil {
		return DescriptorStatus{Code: CodeOK}
	}
	if l.Unlimited {
		return DescriptorStatus{Code: CodeOK, LimitRemaining: math.MaxUint32}
	}
	unix := now.Unix()
	unitSec := l.Unit.Seconds()
	cl := l.current
	if cl == nil {
		cl = &CurrentLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, Name: l.Name}
	}
	st := DescriptorStatus{
		CurrentLimit:       cl,
		DurationUntilReset: time.Duration(unitSec-unix%unitSec) * time.Second,
	}
	rs := in.stats()
	limit := in.limitN
	near := uint64(math.Floor(float64(float32(limit) * s.o.NearLimitRatio)))
	hits, before, after := in.hits, in.before, in.after
	if l.Algorithm == SlidingWindow && !in.localOver {
		w := slidingWeight(in.prev, now, unitSec)
		before, after = before+w, after+w
	}
	over := false
	switch {
	case in.localOver:
		over = true
		rs.OverLimit.Add(hits)
		rs.OverLimitWithLocalCache.Add(hits)
		if l.Algorithm == TokenBucket {
			st.DurationUntilReset = time.Duration(bucketInterval(l.RequestsPerUnit, l.Unit)) * time.Microsecond
		}
	case after > limit:
		over = true
		if before >= limit {
			rs.OverLimit.Add(hits)
		} else {
			rs.OverLimit.Add(after - limit)
			rs.NearLimit.Add(limit - max(near, before))
		}
		switch l.Algorithm {
		case SlidingWindow:
			st.DurationUntilReset = slidingClearIn(in.prev, in.after, limit, now, unitSec)
		case TokenBucket:
			// Until the bucket holds this request's tokens.
			b := &in.bucket
			need := max(int64(b.After), b.Now) + int64(min(hits, uint64(b.Burst)+1))*b.Interval - b.Now - b.Burst*b.Interval
			st.DurationUntilReset = time.Duration(max(need, 1)) * time.Microsecond
		}
		if s.o.LocalCache != nil {
			ttl := time.Duration(unitSec) * time.Second
			if l.Algorithm != FixedWindow {
				ttl = st.DurationUntilReset
			}
			s.o.LocalCache.Add(in.key, ttl)
		}
	default:
		st.LimitRemaining = uint32(min(limit-after, math.MaxUint32))
		if l.Algorithm == TokenBucket {
			b := &in.bucket
			tat, _ := TokenBucketStep(int64(b.After), b)
			st.DurationUntilReset = bucketWait(tat, b.Now, b.Interval)
		}
		rs.WithinLimit.Add(hits)
		if after > near {
			if before >= near {
				rs.NearLimit.Add(hits)
			} else {
				rs.NearLimit.Add(after - near)
			}
		}
	}
	st.Code = CodeOK
	if over {
		st.Code = CodeOverLimit
		if l.ShadowMode {
			st.Code = CodeOK
			if in.localOver || before >= limit {
				rs.ShadowMode.Add(hits)
			} else {
				rs.ShadowMode.Add(after - limit)
			}
		}
	}
	return st
}

// dropReplaced removes every matched limit whose name another matched limit replaces.
func dropReplaced(infos []limitInfo) {
	var replacing map[string]bool
	for i := range infos {
		if l := infos[i].m.limit; l != nil {
			for _, r := range l.Replaces {
				if replacing == nil {
					replacing = map[string]bool{}
				}
				replacing[r] = true
			}
		}
	}
	if replacing == nil {
		return
	}
	for i := range infos {
		if l := infos[i].m.limit; l != nil && replacing[l.Name] {
			infos[i].m = match{}
		}
	}
}

// hitsAddend: the descriptor's own value when present (0 included), else the
// request's, at least 1.
func hitsAddend(req *Request, i int) uint64 {
	if h := req.Descriptors[i].HitsAddend; h != nil {
		return *h
	}
	return uint64(max(1, req.HitsAddend))
}

// cacheKey is byte-identical to the reference's:
// PREFIX + domain + "_" + (key + "_" + value + "_")... + windowStart.
func (s *Service) cacheKey(domain string, entries []Entry, shared []string, unit Unit, unix int64) string {
	n := len(s.o.CacheKeyPrefix) + len(domain) + 1 + 20
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(s.o.CacheKeyPrefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range entries {
		b.WriteString(e.Key)
		b.WriteByte('_')
		if shared != nil && shared[i] != "" {
			b.WriteString(shared[i])
		} else {
			b.WriteString(e.Value)
		}
		b.WriteByte('_')
	}
	div := unit.Seconds()
	if div == 0 { // a token bucket: one key for all time
		b.WriteString(tokenBucketSuffix)
		return b.String()
	}
	var buf [20]byte
	b.Write(strconv.AppendInt(buf[:0], (unix/div)*div, 10))
	return b.String()
}

func (s *Service) ttl(u Unit) time.Duration {
	sec := u.Seconds()
	if maxJ := int64(s.o.ExpirationJitterMax / time.Second); maxJ > 0 {
		sec += s.o.Jitter(maxJ)
	}
	return time.Duration(sec) * time.Second
}

// headers picks the status to describe, as the reference: the smallest
// remaining (first on ties), overridden by any non-quota OVER_LIMIT (last wins).
func (s *Service) headers(infos []limitInfo, sts []DescriptorStatus) []Header {
	pick := -1
	for i := range sts {
		if sts[i].CurrentLimit == nil {
			continue
		}
		if pick < 0 || sts[i].LimitRemaining < sts[pick].LimitRemaining {
			pick = i
		}
	}
	for i := range sts {
		l := infos[i].m.limit
		if sts[i].CurrentLimit != nil && sts[i].Code == CodeOverLimit && !(s.o.QuotaMode || (l != nil && l.QuotaMode)) {
			pick = i
		}
	}
	if pick < 0 {
		return nil
	}
	st := sts[pick]
	// Whole seconds, rounded up: a fixed window's reset is whole already
	// (the reference's unit - now % unit); a bucket's or a sliding window's
	// is when the client may try again.
	reset := CeilSeconds(st.DurationUntilReset)
	return []Header{
		{s.o.Headers.Limit, strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{s.o.Headers.Remaining, strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{s.o.Headers.Reset, strconv.FormatInt(reset, 10)},
	}
}

// dynamicMetadata is the RESPONSE_DYNAMIC_METADATA struct, with numbers as
// float64 as in a protobuf Struct.
func dynamicMetadata(req *Request, infos []limitInfo, sts []DescriptorStatus) map[string]any {
	descs := make([]any, len(req.Descriptors))
	for i, d := range req.Descriptors {
		entries := make([]any, len(d.Entries))
		for j, e := range d.Entries {
			entries[j] = e.Key + "=" + e.Value
		}
		dm := map[string]any{"entries": entries}
		if d.Limit != nil {
			dm["limit"] = fmt.Sprintf("requests_per_unit:%d unit:%s", d.Limit.RequestsPerUnit, d.Limit.Unit)
		}
		if d.HitsAddend != nil {
			dm["hitsAddend"] = float64(*d.HitsAddend)
		}
		descs[i] = dm
	}
	out := map[string]any{"domain": req.Domain, "descriptors": descs}
	if req.HitsAddend != 0 {
		out["hitsAddend"] = float64(req.HitsAddend)
	}
	var merged map[string]any
	for i := range infos {
		l := infos[i].m.limit
		if l == nil || l.Unlimited || l.Metadata == nil || sts[i].Code == CodeOverLimit {
			continue
		}
		if merged == nil {
			merged = map[string]any{}
		}
		mergeFirstWins(merged, l.Metadata)
	}
	if merged != nil {
		out["metadata"] = merged
	}
	return out
}

// mergeFirstWins merges src into dst recursively; existing scalars are kept.
func mergeFirstWins(dst, src map[string]any) {
	for k, v := range src {
		cur, ok := dst[k]
		if !ok {
			dst[k] = deepCopy(v)
			continue
		}
		cm, ok1 := cur.(map[string]any)
		sm, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			mergeFirstWins(cm, sm)
		}
	}
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = deepCopy(e)
		}
		return s
	}
	return v
}
