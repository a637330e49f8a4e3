package redis

import (
	"context"
	"fmt"
	"sort"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/engine"
)

// Exchange is the quota service's claims board on Redis: each post is one
// field (the replica) of a hash (the key), written, the hash's expiry
// refreshed and the whole hash read, all posts in one pipeline (the
// cluster client splits it by node); the fields of replicas that stopped
// writing (older than the TTL) are deleted in a second one. Every replica
// sharing the counters shares the board.
func (b *Backend) Exchange(ctx context.Context, replica string, posts []engine.ClaimPost) ([][]engine.ClaimEntry, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if len(posts) == 0 {
		return nil, nil
	}
	reads := make([]*goredis.MapStringStringCmd, len(posts))
	_, err := b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, post := range posts {
			p.HSet(ctx, post.Key, replica, engine.StampClaim(post.At, post.Value))
			p.PExpire(ctx, post.Key, post.TTL)
			reads[i] = p.HGetAll(ctx, post.Key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis claims board: %w", err)
	}
	out := make([][]engine.ClaimEntry, len(posts))
	var stale []staleField
	for i, r := range reads {
		m := r.Val()
		names := make([]string, 0, len(m))
		for k := range m {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			at, v, ok := engine.UnstampClaim([]byte(m[k]))
			if !ok || posts[i].At.Sub(at) > posts[i].TTL {
				stale = append(stale, staleField{posts[i].Key, k})
				continue
			}
			out[i] = append(out[i], engine.ClaimEntry{Replica: k, Value: v, At: at})
		}
	}
	if len(stale) > 0 {
		_, _ = b.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, f := range stale {
				p.HDel(ctx, f.key, f.field)
			}
			return nil
		}) // best effort: the next exchange finds them again
	}
	return out, nil
}

type staleField struct{ key, field string }
