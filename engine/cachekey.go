package engine

import (
	"strconv"
	"strings"
	"time"
)

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
