package transport

// The quota stream's messages by hand, as wire.go does the RLS call's: a
// flood's report of a thousand new buckets decoded through the generated
// types made a map per BucketId and five more objects per usage (a
// quarter of the server's CPU in the 1,000 × 1,000 flood, the maps kept
// for the buckets' lives), where a bucket is one string (alloc.BucketID)
// from the wire to the hub and back to the answer. The decoder follows
// protobuf-go's rules (unknown and mistyped fields skipped, repeated
// singular messages merged, a later map entry for a key replacing an
// earlier one, UTF-8 checked on strings); differential fuzz tests against
// proto.Unmarshal and proto.Marshal pin both directions.

import (
	"errors"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/quota"
)

// reportsDecoder decodes a stream's RateLimitQuotaUsageReports, keeping
// its scratch between them: one per stream, used by its receiver.
type reportsDecoder struct {
	pairs []alloc.Pair
}

// decode reads an envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports.
// Nothing returned shares memory with buf.
func (d *reportsDecoder) decode(buf []byte) (domain string, usages []quota.Usage, err error) {
	// One copy of the message, which the entries' strings slice while a
	// BucketID is made of them; only what is kept is copied again.
	text := string(buf)
	// One pass, in wire order: the first error met is the one
	// proto.Unmarshal reports (bad UTF-8 before a truncated tail, say).
	it := fields{buf: buf, end: len(buf)}
	for it.next() {
		switch f := it.f; {
		case f.is(1, protowire.BytesType):
			if domain = text[f.start:f.end]; !utf8.ValidString(domain) {
				return "", nil, errStringUTF8
			}
		case f.is(2, protowire.BytesType):
			u, err := d.usage(buf, text, f.start, f.end)
			if err != nil {
				return "", nil, err
			}
			usages = append(usages, u)
		}
	}
	if it.err != nil {
		return "", nil, it.err
	}
	return strings.Clone(domain), usages, nil
}

// usage decodes a RateLimitQuotaUsageReports.BucketQuotaUsage.
func (d *reportsDecoder) usage(buf []byte, text string, start, end int) (quota.Usage, error) {
	var u quota.Usage
	var elapsed durationpb.Duration
	d.pairs = d.pairs[:0]
	it := fields{buf: buf, pos: start, end: end}
	for it.next() {
		switch f := it.f; {
		case f.is(1, protowire.BytesType):
			// A second bucket_id merges into the first: its entries join.
			if err := d.bucketID(buf, text, f.start, f.end); err != nil {
				return u, err
			}
		case f.is(2, protowire.BytesType):
			if err := mergeDuration(buf, f.start, f.end, &elapsed); err != nil {
				return u, err
			}
		case f.is(3, protowire.VarintType):
			u.Allowed = f.x
		case f.is(4, protowire.VarintType):
			u.Denied = f.x
		}
	}
	if it.err != nil {
		return u, it.err
	}
	u.Elapsed = elapsed.AsDuration()
	if len(d.pairs) > 0 {
		u.Bucket = alloc.BucketOfPairs(d.pairs)
	}
	clear(d.pairs) // the scratch keeps no string of this message
	return u, nil
}

// errStringUTF8 is protobuf-go's error for a string that is not UTF-8
// (its fast path names no field).
var errStringUTF8 = errors.New("string field contains invalid UTF-8")

// bucketID decodes a BucketId's map entries into d.pairs, in wire order.
func (d *reportsDecoder) bucketID(buf []byte, text string, start, end int) error {
	it := fields{buf: buf, pos: start, end: end}
	for it.next() {
		if !it.f.is(1, protowire.BytesType) {
			continue
		}
		var p alloc.Pair
		entry := fields{buf: buf, pos: it.f.start, end: it.f.end}
		for entry.next() {
			switch f := entry.f; {
			case f.is(1, protowire.BytesType):
				if p.Key = text[f.start:f.end]; !utf8.ValidString(p.Key) {
					return errStringUTF8
				}
			case f.is(2, protowire.BytesType):
				if p.Value = text[f.start:f.end]; !utf8.ValidString(p.Value) {
					return errStringUTF8
				}
			}
		}
		if entry.err != nil {
			return entry.err
		}
		d.pairs = append(d.pairs, p)
	}
	return it.err
}

// mergeDuration decodes a google.protobuf.Duration into out, field by
// field as a merge does.
func mergeDuration(buf []byte, start, end int, out *durationpb.Duration) error {
	it := fields{buf: buf, pos: start, end: end}
	for it.next() {
		switch f := it.f; {
		case f.is(1, protowire.VarintType):
			out.Seconds = int64(f.x)
		case f.is(2, protowire.VarintType):
			out.Nanos = int32(f.x)
		}
	}
	return it.err
}

// actionSize is the encoded length of a's BucketAction, not counting the
// tag and length that put it in a RateLimitQuotaResponse.
func actionSize(a *quota.Action) int { return actionSizeWith(a, bucketIDSize(a.Bucket)) }

// actionSizeWith is actionSize given a's BucketId's size (reading the
// BucketID once per action written, not once per size taken).
func actionSizeWith(a *quota.Action, bid int) int {
	n := 1 + sizeBytes(bid)
	if a.Abandon {
		return n + 1 + sizeBytes(0)
	}
	return n + 1 + sizeBytes(assignmentSize(a))
}

// actionFrameSize is what a costs in a RateLimitQuotaResponse.
func actionFrameSize(a *quota.Action) int { return 1 + sizeBytes(actionSize(a)) }

func bucketIDSize(b alloc.BucketID) int {
	n := 0
	for k, v := range b.All() {
		n += 1 + sizeBytes(entrySize(k, v))
	}
	return n
}

// entrySize is a map entry's: protobuf-go writes its key and value even
// when empty.
func entrySize(k, v string) int { return 1 + sizeBytes(len(k)) + 1 + sizeBytes(len(v)) }

func assignmentSize(a *quota.Action) int {
	return 1 + sizeBytes(durationSize(a.TTL)) + 1 + sizeBytes(strategySize(a.Strategy))
}

func strategySize(s alloc.Strategy) int {
	switch s.Kind {
	case alloc.TokenBucket:
		return 1 + sizeBytes(tokenBucketSize(s))
	case alloc.DenyAll:
		return 1 + protowire.SizeVarint(1)
	}
	return 1 + protowire.SizeVarint(0) // ALLOW_ALL: a oneof's zero is written
}

func tokenBucketSize(s alloc.Strategy) int {
	n := 0
	if s.MaxTokens != 0 {
		n += 1 + protowire.SizeVarint(uint64(s.MaxTokens))
	}
	n += 1 + sizeBytes(uint32ValueSize(s.TokensPerFill))
	n += 1 + sizeBytes(durationSize(s.FillInterval))
	return n
}

func uint32ValueSize(v uint32) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(v))
}

// appendAction appends a as a RateLimitQuotaResponse's bucket_action
// (field 1), fields in number order as protobuf-go writes them.
func appendAction(b []byte, a *quota.Action) []byte {
	bid := bucketIDSize(a.Bucket)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(actionSizeWith(a, bid)))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(bid))
	for k, v := range a.Bucket.All() {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entrySize(k, v)))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	if a.Abandon {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		return protowire.AppendVarint(b, 0)
	}
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(assignmentSize(a)))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = appendDuration(b, a.TTL)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(strategySize(a.Strategy)))
	switch s := a.Strategy; s.Kind {
	case alloc.TokenBucket:
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(tokenBucketSize(s)))
		if s.MaxTokens != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(s.MaxTokens))
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(uint32ValueSize(s.TokensPerFill)))
		if s.TokensPerFill != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(s.TokensPerFill))
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = appendDuration(b, s.FillInterval)
	case alloc.DenyAll:
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	default:
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 0)
	}
	return b
}
