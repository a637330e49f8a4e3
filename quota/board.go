package quota

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
)

// Board is where the replicas serving a bucket tell each other what their
// Envoys claim of it, so that each divides the limit max-min fair over the
// whole fleet rather than over its own Envoys alone. The store backends
// implement it (a Redis hash per bucket, a memcache key per bucket, a map
// in the memory backend).
type Board interface {
	// Exchange writes each post (replica's entry under post.Key, the key
	// kept for post.TTL) and returns, for each post, every replica's
	// entry under its key, this one's included.
	Exchange(ctx context.Context, replica string, posts []engine.ClaimPost) ([][]engine.ClaimEntry, error)
}

const (
	// boardEvery is how often a hub publishes its claims when they do not
	// change, and reads the others'.
	boardEvery = time.Second
	// boardStale is how old an entry may be and still count: a replica
	// that stopped (or lost the bucket) drops out after it.
	boardStale = 3 * time.Second
	// boardTTL keeps a bucket's key while a replica publishes to it.
	boardTTL = time.Minute
)

// claimsValue encodes what a hub publishes: when (unix milliseconds, by
// its replica's clock), the overhead, and the claims (a negative rate is
// an unknown demand).
func claimsValue(at time.Time, overhead float64, claims []alloc.Claim) []byte {
	b := make([]byte, 0, 16+4*len(claims))
	b = binary.BigEndian.AppendUint64(b, uint64(at.UnixMilli()))
	b = binary.BigEndian.AppendUint32(b, math.Float32bits(float32(overhead)))
	for _, c := range claims {
		r := float32(c.Rate)
		if !c.Known {
			r = -1
		}
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(r))
	}
	return b
}

// errBadEntry is a board entry that is not one of claimsValue's.
var errBadEntry = errors.New("rlqs: board entry is not claims")

func parseClaims(b []byte) (at time.Time, overhead float64, claims []alloc.Claim, err error) {
	if len(b) < 12 || (len(b)-12)%4 != 0 {
		return time.Time{}, 0, nil, errBadEntry
	}
	at = time.UnixMilli(int64(binary.BigEndian.Uint64(b)))
	overhead = float64(math.Float32frombits(binary.BigEndian.Uint32(b[8:])))
	for p := 12; p < len(b); p += 4 {
		r := float64(math.Float32frombits(binary.BigEndian.Uint32(b[p:])))
		switch {
		case math.IsNaN(r) || math.IsInf(r, 0):
			return time.Time{}, 0, nil, errBadEntry
		case r < 0:
			claims = append(claims, alloc.Claim{})
		default:
			claims = append(claims, alloc.Claim{Rate: r, Known: true})
		}
	}
	if math.IsNaN(overhead) || math.IsInf(overhead, 0) || overhead < 0 {
		return time.Time{}, 0, nil, errBadEntry
	}
	return at, overhead, claims, nil
}

// boardDue reports whether h should publish now: its claims moved, or it
// has not for boardEvery.
func (sh *shard) boardDue(h *hub, now time.Time) bool {
	if now.Sub(h.posted) >= boardEvery || len(h.claims) != len(h.postedClaims) {
		return true
	}
	for i, c := range h.claims {
		if moved(h.postedClaims[i], c, sh.s.o.Alloc.Hysteresis) {
			return true
		}
	}
	return false
}

// boardCall is one exchange of a shard.
type boardCall struct {
	hubs    []*hub
	posts   []engine.ClaimPost
	entries [][]engine.ClaimEntry
	err     error
	at      time.Time
}

// exchange publishes the claims of the hubs that want to, and reads the
// others', in one call (one at a time per shard).
func (sh *shard) exchange(now time.Time) {
	s := sh.s
	if s.board == nil || sh.boardCalling || len(sh.boardWant) == 0 {
		return
	}
	c := &boardCall{at: now}
	for _, h := range sh.boardWant {
		if h.gone || h.rule.Limit == nil {
			continue
		}
		h.posted = now
		h.postedClaims = append(h.postedClaims[:0], h.claims...)
		c.hubs = append(c.hubs, h)
		c.posts = append(c.posts, engine.ClaimPost{Key: h.rule.WindowKey(time.Unix(0, 0)) + "_rlqs", TTL: boardTTL,
			At: now, Value: claimsValue(now, h.overhead, h.claims)})
	}
	sh.boardWant = sh.boardWant[:0]
	if len(c.posts) == 0 {
		return
	}
	run := func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.o.CallTimeout)
		defer cancel()
		c.entries, c.err = s.board.Exchange(ctx, s.o.Replica, c.posts)
	}
	if s.manual {
		run()
		sh.boardResult(c)
		return
	}
	sh.boardCalling = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		run()
		select {
		case sh.results <- msg{kind: msgBoard, board: c}:
		case <-s.stop:
		}
	}()
}

// boardResult takes what the other replicas published.
func (sh *shard) boardResult(c *boardCall) {
	s := sh.s
	sh.boardCalling = false
	if c.err != nil || len(c.entries) != len(c.hubs) {
		s.st.boardErrors.Inc()
		return
	}
	now := s.o.Clock()
	for i, h := range c.hubs {
		if h.gone {
			continue
		}
		var others alloc.Others
		for _, e := range c.entries[i] {
			if e.Replica == s.o.Replica {
				continue
			}
			at, overhead, claims, err := parseClaims(e.Value)
			if err != nil {
				s.st.boardErrors.Inc()
				continue
			}
			if d := now.Sub(at); d > boardStale || d < -boardStale {
				continue // a replica that stopped, or a clock far off
			}
			others.Claims = append(others.Claims, claims...)
			others.Overhead += overhead
		}
		changed := len(others.Claims) != len(h.others.Claims) || math.Abs(others.Overhead-h.others.Overhead) > 1
		for j := 0; !changed && j < len(others.Claims); j++ {
			changed = moved(h.others.Claims[j], others.Claims[j], s.o.Alloc.Hysteresis)
		}
		h.others, h.othersAt = others, now
		if changed {
			sh.markDirty(h)
		}
	}
}
