package engine

import (
	"fmt"
	"strconv"
)

// HeaderOptions are the RateLimit-* response headers (LIMIT_RESPONSE_HEADERS_ENABLED).
type HeaderOptions struct {
	Enabled   bool
	Limit     string
	Remaining string
	Reset     string
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
