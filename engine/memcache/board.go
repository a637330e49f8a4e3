package memcache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/backoff"
)

// Exchange is the quota service's claims board on memcached: each key
// holds every replica's entry, encoded together, and a replica writes its
// own by compare-and-swap (memcached has no hash type). Posts are
// exchanged one after another.
func (b *Backend) Exchange(ctx context.Context, replica string, posts []engine.ClaimPost) ([][]engine.ClaimEntry, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	b.inflight.Add(1)
	b.mu.Unlock()
	defer b.inflight.Done()
	out := make([][]engine.ClaimEntry, len(posts))
	for i, p := range posts {
		if err := ValidateKey(p.Key); err != nil {
			return nil, fmt.Errorf("memcache claims board: %w", err)
		}
		entries, err := b.exchangeOne(ctx, replica, p)
		if err != nil {
			return nil, fmt.Errorf("memcache claims board: %w", err)
		}
		out[i] = entries
	}
	return out, nil
}

func (b *Backend) exchangeOne(ctx context.Context, replica string, p engine.ClaimPost) ([]engine.ClaimEntry, error) {
	for attempt := 0; attempt < bucketCASAttempts; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		it, err := b.client.Get(p.Key)
		b.record(err)
		m := map[string][]byte{}
		switch {
		case errors.Is(err, memcache.ErrCacheMiss):
			it = nil
		case err != nil:
			return nil, fmt.Errorf("get: %w", err)
		default:
			if m, err = decodeBoard(it.Value); err != nil {
				// Not ours to read: written over with what we know.
				m = map[string][]byte{}
			}
		}
		m[replica] = engine.StampClaim(p.At, p.Value)
		for r, v := range m {
			if at, _, ok := engine.UnstampClaim(v); !ok || p.At.Sub(at) > p.TTL {
				delete(m, r) // a replica that stopped writing
			}
		}
		value := encodeBoard(m)
		if len(value) > maxBoardValue {
			return nil, fmt.Errorf("the entries under %q take %d bytes, over %d", p.Key, len(value), maxBoardValue)
		}
		exp := b.expiration(p.TTL)
		err = b.addOrSwap(it, p.Key, value, exp)
		switch {
		case err == nil:
			return boardEntries(m), nil
		case errors.Is(err, memcache.ErrCASConflict), errors.Is(err, memcache.ErrNotStored), errors.Is(err, memcache.ErrCacheMiss):
			t := time.NewTimer(backoff.Delay(attempt, 50*time.Microsecond, 5*time.Millisecond, rand.Float64()))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		default:
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	return nil, errContended
}

// maxBoardValue keeps a board key well within memcached's item size.
const maxBoardValue = 512 << 10

// encodeBoard writes the entries as (name length, name, value length,
// value), uvarints, names in order.
func encodeBoard(m map[string][]byte) []byte {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []byte
	for _, k := range names {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
		out = binary.AppendUvarint(out, uint64(len(m[k])))
		out = append(out, m[k]...)
	}
	return out
}

var errBadBoard = errors.New("not a claims board value")

func decodeBoard(b []byte) (map[string][]byte, error) {
	m := map[string][]byte{}
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, errBadBoard
		}
		name := string(b[k : k+int(n)])
		b = b[k+int(n):]
		n, k = binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, errBadBoard
		}
		m[name] = append([]byte(nil), b[k:k+int(n)]...)
		b = b[k+int(n):]
	}
	return m, nil
}

func boardEntries(m map[string][]byte) []engine.ClaimEntry {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]engine.ClaimEntry, 0, len(m))
	for _, k := range names {
		at, v, _ := engine.UnstampClaim(m[k])
		out = append(out, engine.ClaimEntry{Replica: k, Value: v, At: at})
	}
	return out
}
