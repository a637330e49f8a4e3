package engine

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/engine/stats"
)

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

	d := descriptorAt{req: req, now: now, unix: now.Unix()}
	for i := range infos {
		in := &infos[i]
		l := in.m.limit
		if l == nil || l.Unlimited {
			continue
		}
		d.i = i
		in.hits = hitsAddend(req, i)
		in.limitN = uint64(l.RequestsPerUnit)
		alg := l.Algorithm
		if err := alg.admit(in); err != nil {
			s.serviceError.Inc()
			return ops, err
		}
		in.key = alg.key(s, &d, in)
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
		ops = alg.appendOps(s, &d, in, ops)
		if s.leased(l) && !s.o.StopIncrementOnLimit {
			markLease(ops, in, alg, now)
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
			reads[j] = Get(ops[j].Key).OnSecondLane(ops[j].PerSecond)
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
func (in *limitInfo) overIfCounted(reads []CounterOp, hits uint64, now time.Time) bool {
	return in.m.limit.Algorithm.overIfCounted(in, reads, hits, now)
}

// fill copies counts back: after is the backend's count, before is after
// less the descriptor's hits. wanted (stop-increment mode) holds the hits
// each op would have carried; each algorithm judges a key sent with 0
// hits its own way.
func (s *Service) fill(infos []limitInfo, ops []CounterOp, wanted []uint64) {
	for i := range infos {
		in := &infos[i]
		if in.op >= 0 {
			in.m.limit.Algorithm.fill(in, ops, wanted)
		}
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
	unitSec := l.Unit.Seconds()
	window := time.Duration(unitSec-now.Unix()%unitSec) * time.Second
	cl := l.current
	if cl == nil {
		cl = &CurrentLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, Name: l.Name}
	}
	st := DescriptorStatus{CurrentLimit: cl, Code: CodeOK}
	alg := l.Algorithm
	before, after := alg.counts(in, now)
	v := within
	switch {
	case in.localOver:
		v = localOver
	case after > in.limitN:
		v = over
	default:
		st.LimitRemaining = uint32(min(in.limitN-after, math.MaxUint32))
	}
	st.DurationUntilReset = alg.reset(in, v, window, now)
	s.countStats(in, v, before, after)
	if v == over && s.o.LocalCache != nil {
		s.o.LocalCache.Add(in.key, alg.cacheTTL(time.Duration(unitSec)*time.Second, st.DurationUntilReset))
	}
	if v != within && !l.ShadowMode {
		st.Code = CodeOverLimit
	}
	return st
}

// countStats adds a descriptor's hits to its rule's statistics, as the
// reference's base limiter does: over-limit hits, the near-limit share,
// within-limit hits and what shadow mode let through.
func (s *Service) countStats(in *limitInfo, v verdict, before, after uint64) {
	rs := in.stats()
	limit, hits := in.limitN, in.hits
	near := uint64(math.Floor(float64(float32(limit) * s.o.NearLimitRatio)))
	switch v {
	case localOver:
		rs.OverLimit.Add(hits)
		rs.OverLimitWithLocalCache.Add(hits)
	case over:
		if before >= limit {
			rs.OverLimit.Add(hits)
		} else {
			rs.OverLimit.Add(after - limit)
			rs.NearLimit.Add(limit - max(near, before))
		}
	default:
		rs.WithinLimit.Add(hits)
		if after > near {
			if before >= near {
				rs.NearLimit.Add(hits)
			} else {
				rs.NearLimit.Add(after - near)
			}
		}
		return
	}
	if in.m.limit.ShadowMode {
		if v == localOver || before >= limit {
			rs.ShadowMode.Add(hits)
		} else {
			rs.ShadowMode.Add(after - limit)
		}
	}
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
