package engine

import "time"

// ClaimPost is one replica's entry under one key of a claims board: the
// quota service's replicas each publish what their Envoys claim of a
// bucket and read the others' (quota.Board). The store backends
// keep the board beside the counters, so that every replica sharing the
// counters shares it too.
type ClaimPost struct {
	Key   string
	Value []byte
	// At is when the replica wrote it (its own clock): the board drops
	// the entries older than TTL, a replica's that stopped.
	At time.Time
	// TTL keeps the key, and each entry, while replicas publish to it.
	TTL time.Duration
}

// ClaimEntry is what one replica published under a key, and when.
type ClaimEntry struct {
	Replica string
	Value   []byte
	At      time.Time
}

// StampClaim is how the backends store an entry: its time (unix
// milliseconds, 8 bytes big-endian), then its value.
func StampClaim(at time.Time, value []byte) []byte {
	b := make([]byte, 8, 8+len(value))
	ms := uint64(at.UnixMilli())
	for i := 7; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	return append(b, value...)
}

// UnstampClaim reads what StampClaim wrote; ok is false for anything else.
func UnstampClaim(b []byte) (at time.Time, value []byte, ok bool) {
	if len(b) < 8 {
		return time.Time{}, nil, false
	}
	var ms uint64
	for _, c := range b[:8] {
		ms = ms<<8 | uint64(c)
	}
	return time.UnixMilli(int64(ms)), b[8:], true
}
