package alloc

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/engine"
)

// Entries reads a BucketId's map as the descriptor whose rule the bucket
// falls under: the keys that order names, in that order, then the others
// by name (byte order). A BucketId is a map, unordered on the wire and by
// definition ("{a, b} and {b, a} are identical"), while a domain's rules
// are nested descriptors, matched entry by entry from the top. So the
// order is sluice's to fix: by default sorted keys, which needs no
// configuration and gives every Envoy the same descriptor for the same
// bucket; Options.KeyOrder names the keys of a domain whose rules nest in
// another order (tenant above path, say). A name in order that the bucket
// lacks is skipped, and one named twice counts at its first place.
//
// The descriptor matches as an RLS request's would: a rule applies only
// at its last entry, so a bucket with keys its rule does not nest falls
// under no rule.
func Entries(bucket map[string]string, order []string) []engine.Entry {
	out := make([]engine.Entry, 0, len(bucket))
	var used map[string]bool
	for _, k := range order {
		v, ok := bucket[k]
		if !ok || used[k] {
			continue
		}
		if used == nil {
			used = make(map[string]bool, len(order))
		}
		used[k] = true
		out = append(out, engine.Entry{Key: k, Value: v})
	}
	if len(out) == len(bucket) {
		return out
	}
	for _, k := range slices.Sorted(maps.Keys(bucket)) {
		if !used[k] {
			out = append(out, engine.Entry{Key: k, Value: bucket[k]})
		}
	}
	return out
}

// Key is a BucketId's identity: the same for every order of its map, and
// different for different maps (keys and values are length-prefixed, so no
// choice of bytes in them makes two maps collide).
func Key(bucket map[string]string) string {
	keys := slices.Sorted(maps.Keys(bucket))
	var b strings.Builder
	for _, k := range keys {
		v := bucket[k]
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	return b.String()
}
