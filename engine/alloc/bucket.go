package alloc

import (
	"cmp"
	"iter"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/engine"
)

// BucketID is an RLQS BucketId in one canonical form: its entries sorted
// by key, each key and value length-prefixed ("3:env4:prod4:name1:b"). A
// BucketId is a map, unordered on the wire and by definition ("{a, b} and
// {b, a} are identical"), so equal maps give equal BucketIDs; the length
// prefixes keep different maps apart whatever bytes their strings hold.
//
// It is also how the quota service keeps a bucket: one string per bucket
// instead of a map (a flood's million buckets held 287 MB of maps), read
// back as entries when a rule is looked up or an answer written.
type BucketID string

// Pair is one entry of a BucketId.
type Pair struct{ Key, Value string }

// BucketOf is m's BucketID.
func BucketOf(m map[string]string) BucketID {
	pairs := make([]Pair, 0, len(m))
	for k, v := range m {
		pairs = append(pairs, Pair{k, v})
	}
	return BucketOfPairs(pairs)
}

// BucketOfPairs is the BucketID of the map the pairs make when put in it
// in order: a later pair of a key replaces an earlier one, as a later map
// entry does on the wire. It sorts pairs in place.
func BucketOfPairs(pairs []Pair) BucketID {
	slices.SortStableFunc(pairs, func(a, b Pair) int { return strings.Compare(a.Key, b.Key) })
	// Keep the last of each run of one key.
	out := pairs[:0]
	for i, p := range pairs {
		if i+1 < len(pairs) && pairs[i+1].Key == p.Key {
			continue
		}
		out = append(out, p)
	}
	return encodePairs(out)
}

// encodePairs writes pairs, sorted by key and each key once.
func encodePairs(pairs []Pair) BucketID {
	n := 0
	for _, p := range pairs {
		n += digits(len(p.Key)) + len(p.Key) + digits(len(p.Value)) + len(p.Value) + 2
	}
	b := make([]byte, 0, n)
	for _, p := range pairs {
		b = strconv.AppendInt(b, int64(len(p.Key)), 10)
		b = append(b, ':')
		b = append(b, p.Key...)
		b = strconv.AppendInt(b, int64(len(p.Value)), 10)
		b = append(b, ':')
		b = append(b, p.Value...)
	}
	return BucketID(b)
}

// digits is how many decimal digits n ≥ 0 has.
func digits(n int) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}

// All yields b's entries in key order. A malformed BucketID (not made by
// this package) ends early.
func (b BucketID) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		s := string(b)
		for len(s) > 0 {
			k, rest, ok := cut(s)
			if !ok {
				return
			}
			v, rest, ok := cut(rest)
			if !ok || !yield(k, v) {
				return
			}
			s = rest
		}
	}
}

// cut reads one length-prefixed string off s.
func cut(s string) (field, rest string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 {
		return "", "", false
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil || n < 0 || n > len(s)-i-1 {
		return "", "", false
	}
	return s[i+1 : i+1+n], s[i+1+n:], true
}

// Len is how many entries b has.
func (b BucketID) Len() int {
	n := 0
	for range b.All() {
		n++
	}
	return n
}

// Map is b as a map.
func (b BucketID) Map() map[string]string {
	m := make(map[string]string)
	for k, v := range b.All() {
		m[k] = v
	}
	return m
}

// Entries reads b as the descriptor whose rule the bucket falls under:
// the keys that order names, in that order, then the others by name (byte
// order). A domain's rules are nested descriptors, matched entry by entry
// from the top, while a BucketId has no order, so the order is sluice's
// to fix: by default sorted keys, which needs no configuration and gives
// every Envoy the same descriptor for the same bucket; Options.KeyOrder
// names the keys of a domain whose rules nest in another order (tenant
// above path, say). A name in order that the bucket lacks is skipped, and
// one named twice counts at its first place.
//
// The descriptor matches as an RLS request's would: a rule applies only
// at its last entry, so a bucket with keys its rule does not nest falls
// under no rule.
func (b BucketID) Entries(order []string) []engine.Entry {
	var all []engine.Entry
	for k, v := range b.All() {
		all = append(all, engine.Entry{Key: k, Value: v})
	}
	if len(order) == 0 {
		return all
	}
	out := make([]engine.Entry, 0, len(all))
	used := make([]bool, len(all))
	for _, k := range order {
		i, ok := slices.BinarySearchFunc(all, k, func(e engine.Entry, k string) int { return cmp.Compare(e.Key, k) })
		if !ok || used[i] {
			continue
		}
		used[i] = true
		out = append(out, all[i])
	}
	for i, e := range all {
		if !used[i] {
			out = append(out, e)
		}
	}
	return out
}
