package transport

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/quota"
)

func reportsBytes(t testing.TB, m *rlqsv3.RateLimitQuotaUsageReports) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func usageOf(bucket map[string]string, elapsed *durationpb.Duration, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: bucket},
		TimeElapsed: elapsed, NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

// reportsSeeds are messages as Envoy sends them, and the shapes protobuf
// decodes by rules of its own.
func reportsSeeds(t testing.TB) [][]byte {
	typical := reportsBytes(t, &rlqsv3.RateLimitQuotaUsageReports{Domain: "rlqs", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usageOf(map[string]string{"user": "alice", "path": "/api"}, durationpb.New(5*time.Second), 120, 3),
		usageOf(map[string]string{"user": "bob"}, durationpb.New(1500*time.Millisecond), 0, 0),
		usageOf(map[string]string{"name": "x"}, nil, 7, 0),
	}})
	first := reportsBytes(t, &rlqsv3.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usageOf(map[string]string{"k": "v"}, durationpb.New(0), 0, 0)}})
	// A usage's bucket_id twice (merged: entries join, the later value of
	// a key wins), time_elapsed twice (merged field by field), an unknown
	// field, a mistyped known one.
	var u []byte
	u = protowire.AppendTag(u, 1, protowire.BytesType)
	u = protowire.AppendBytes(u, mapEntries([2]string{"a", "1"}, [2]string{"b", "2"}))
	u = protowire.AppendTag(u, 1, protowire.BytesType)
	u = protowire.AppendBytes(u, mapEntries([2]string{"a", "3"}))
	u = protowire.AppendTag(u, 2, protowire.BytesType)
	u = protowire.AppendBytes(u, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 4))
	u = protowire.AppendTag(u, 2, protowire.BytesType)
	u = protowire.AppendBytes(u, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 5e8))
	u = protowire.AppendTag(u, 9, protowire.Fixed64Type)
	u = protowire.AppendFixed64(u, 1)
	u = protowire.AppendTag(u, 3, protowire.BytesType)
	u = protowire.AppendBytes(u, []byte("mistyped"))
	u = protowire.AppendTag(u, 4, protowire.VarintType)
	u = protowire.AppendVarint(u, math.MaxUint64)
	var merged []byte
	merged = protowire.AppendTag(merged, 1, protowire.BytesType)
	merged = protowire.AppendString(merged, "dom")
	merged = protowire.AppendTag(merged, 2, protowire.BytesType)
	merged = protowire.AppendBytes(merged, u)
	merged = protowire.AppendTag(merged, 1, protowire.BytesType)
	merged = protowire.AppendString(merged, "dom2") // the last domain wins
	// Map entries with a missing value, a missing key, fields repeated.
	odd := mapEntries([2]string{"k", ""})
	odd = protowire.AppendTag(odd, 1, protowire.BytesType)
	odd = protowire.AppendBytes(odd, protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), "v"))
	var oddUsage []byte
	oddUsage = protowire.AppendTag(oddUsage, 1, protowire.BytesType)
	oddUsage = protowire.AppendBytes(oddUsage, odd)
	var oddMsg []byte
	oddMsg = protowire.AppendTag(oddMsg, 2, protowire.BytesType)
	oddMsg = protowire.AppendBytes(oddMsg, oddUsage)
	badUTF8 := reportsBytes(t, &rlqsv3.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usageOf(map[string]string{"k": "v"}, nil, 1, 0)}})
	badUTF8 = bytes.Replace(badUTF8, []byte("v"), []byte{0xff}, 1)
	// Huge and negative durations (AsDuration saturates).
	huge := reportsBytes(t, &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usageOf(map[string]string{"k": "v"}, &durationpb.Duration{Seconds: math.MaxInt64, Nanos: 999_999_999}, 1, 0),
		usageOf(map[string]string{"k": "w"}, &durationpb.Duration{Seconds: -3, Nanos: -5}, 1, 0)}})
	return [][]byte{nil, typical, first, merged, oddMsg, badUTF8, huge, typical[:len(typical)-3], {0x12, 0x05, 0x0a}, {0x00}, {0xfb, 0x01}}
}

func mapEntries(kvs ...[2]string) []byte {
	var b []byte
	for _, kv := range kvs {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, kv[0])
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, kv[1])
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	return b
}

// checkReports compares the hand decoder with proto.Unmarshal and
// reportOf on b: the same error, or the same report.
func checkReports(t *testing.T, b []byte) {
	t.Helper()
	var d reportsDecoder
	domain, usages, err := d.decode(b)
	m := new(rlqsv3.RateLimitQuotaUsageReports)
	werr := proto.Unmarshal(b, m)
	// protobuf-go writes "proto:" and a space or, at random, a no-break
	// space (so that nobody compares its messages); clients see ours.
	unbreak := func(e error) string { return strings.ReplaceAll(e.Error(), "\u00a0", " ") }
	if (err == nil) != (werr == nil) || (err != nil && err.Error() != unbreak(werr)) {
		t.Fatalf("% x: decode error %v, proto.Unmarshal %v", b, err, werr)
	}
	if err != nil {
		return
	}
	want := reportOf(m)
	if domain != want.domain || len(usages) != len(want.usages) {
		t.Fatalf("% x: domain %q and %d usages, want %q and %d", b, domain, len(usages), want.domain, len(want.usages))
	}
	for i := range usages {
		if usages[i] != want.usages[i] {
			t.Fatalf("% x: usage %d is %+v, want %+v", b, i, usages[i], want.usages[i])
		}
	}
}

func TestDecodeReports(t *testing.T) {
	t.Parallel()
	for _, b := range reportsSeeds(t) {
		checkReports(t, b)
	}
	// What the merges make, spelled out.
	var d reportsDecoder
	domain, usages, err := d.decode(reportsSeeds(t)[3])
	if err != nil {
		t.Fatal(err)
	}
	want := quota.Usage{Bucket: alloc.BucketOf(map[string]string{"a": "3", "b": "2"}), Elapsed: 4*time.Second + 500*time.Millisecond, Denied: math.MaxUint64}
	if domain != "dom2" || len(usages) != 1 || usages[0] != want {
		t.Fatalf("got %q %+v, want dom2 and %+v", domain, usages, want)
	}
}

// FuzzDecodeReports: the hand decoder reads every input as proto.Unmarshal
// and reportOf do, errors included.
func FuzzDecodeReports(f *testing.F) {
	for _, b := range reportsSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(checkReports)
}

// TestDecodeReportsKeepsNoBuffer: what a decoded report holds is its own,
// so the transport may reuse the message's buffer.
func TestDecodeReportsKeepsNoBuffer(t *testing.T) {
	t.Parallel()
	b := reportsSeeds(t)[1]
	var d reportsDecoder
	domain, usages, err := d.decode(b)
	if err != nil {
		t.Fatal(err)
	}
	before := []string{domain, string(usages[0].Bucket)}
	for i := range b {
		b[i] = 'x'
	}
	if after := []string{domain, string(usages[0].Bucket)}; after[0] != before[0] || after[1] != before[1] {
		t.Fatalf("the decoded report changed with its buffer: %q, was %q", after, before)
	}
}

// checkAction compares appendAction with proto.Marshal (deterministic,
// whose map order is the BucketID's) of bucketAction's message.
func checkAction(t *testing.T, acts []quota.Action) {
	t.Helper()
	var got []byte
	size := 0
	for i := range acts {
		got = appendAction(got, &acts[i])
		size += actionFrameSize(&acts[i])
	}
	resp := &rlqsv3.RateLimitQuotaResponse{}
	for _, a := range acts {
		resp.BucketAction = append(resp.BucketAction, bucketAction(a))
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%+v:\n got % x\nwant % x", acts, got, want)
	}
	if size != len(got) {
		t.Fatalf("%+v: sized %d, written %d", acts, size, len(got))
	}
}

func TestEncodeActions(t *testing.T) {
	t.Parallel()
	b := alloc.BucketOf(map[string]string{"user": "alice", "path": "/api"})
	for _, acts := range [][]quota.Action{
		{{Bucket: b, Strategy: alloc.Strategy{Kind: alloc.TokenBucket, MaxTokens: 100, TokensPerFill: 10, FillInterval: time.Second}, TTL: 30 * time.Second}},
		{{Bucket: b, Strategy: alloc.Strategy{Kind: alloc.TokenBucket}, TTL: 0}},
		{{Bucket: b, Strategy: alloc.Strategy{Kind: alloc.DenyAll}, TTL: 1500 * time.Millisecond}},
		{{Bucket: b, Strategy: alloc.Strategy{Kind: alloc.AllowAll}, TTL: time.Minute}},
		{{Bucket: b, Abandon: true}, {Bucket: alloc.BucketOf(map[string]string{"k": ""}), Abandon: true}},
		{},
	} {
		checkAction(t, acts)
	}
}

// FuzzEncodeAction: appendAction writes what proto.Marshal writes.
func FuzzEncodeAction(f *testing.F) {
	f.Add("user", "alice", "path", "/api", uint8(0), uint32(100), uint32(10), int64(time.Second), int64(30*time.Second), false)
	f.Add("k", "", "", "v", uint8(1), uint32(0), uint32(0), int64(-1), int64(0), false)
	f.Add("a", "b", "a", "c", uint8(2), uint32(math.MaxUint32), uint32(1), int64(math.MaxInt64), int64(math.MinInt64), true)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, kind uint8, maxTokens, perFill uint32, fill, ttl int64, abandon bool) {
		if !utf8Valid(k1, v1, k2, v2) {
			t.Skip("proto.Marshal refuses invalid UTF-8; a BucketID holds what a decoder accepted")
		}
		kinds := []alloc.Kind{alloc.TokenBucket, alloc.DenyAll, alloc.AllowAll}
		a := quota.Action{Bucket: alloc.BucketOfPairs([]alloc.Pair{{Key: k1, Value: v1}, {Key: k2, Value: v2}}), Abandon: abandon, TTL: time.Duration(ttl),
			Strategy: alloc.Strategy{Kind: kinds[int(kind)%len(kinds)], MaxTokens: maxTokens, TokensPerFill: perFill, FillInterval: time.Duration(fill)}}
		checkAction(t, []quota.Action{a, a})
	})
}

// TestHeavyTokens: at most cap(heavy) large messages are worked on at
// once; a waiter whose call ends gives up without running.
func TestHeavyTokens(t *testing.T) {
	t.Parallel()
	q := &quotaServer{heavy: make(chan struct{}, 1)}
	inside, release := make(chan struct{}), make(chan struct{})
	go func() {
		_ = q.withHeavy(context.Background(), func() { close(inside); <-release })
	}()
	<-inside
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- q.withHeavy(ctx, func() { ran <- struct{}{} }) }()
	select {
	case <-ran:
		t.Fatal("a second large message was worked on while the only token was held")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiter whose call ended: %v, want context.Canceled", err)
	}
	if len(ran) != 0 {
		t.Fatal("it ran")
	}
	close(release)
	if err := q.withHeavy(context.Background(), func() { ran <- struct{}{} }); err != nil || len(ran) != 1 {
		t.Fatalf("after the token came back: %v, ran %d", err, len(ran))
	}
}

// reportOf reads a message decoded by the generated code: the oracle the
// hand decoder is checked against.
func reportOf(m *rlqsv3.RateLimitQuotaUsageReports) report {
	usages := make([]quota.Usage, len(m.GetBucketQuotaUsages()))
	for i, u := range m.GetBucketQuotaUsages() {
		usages[i] = quota.Usage{Elapsed: u.GetTimeElapsed().AsDuration(),
			Allowed: u.GetNumRequestsAllowed(), Denied: u.GetNumRequestsDenied()}
		if b := u.GetBucketId().GetBucket(); len(b) > 0 {
			usages[i].Bucket = alloc.BucketOf(b)
		}
	}
	return report{m.GetDomain(), usages}
}

// bucketAction and strategyProto build the answer with the generated
// types: the oracle the hand encoder is checked against.
func bucketAction(a quota.Action) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	ba := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: a.Bucket.Map()}}
	if a.Abandon {
		ba.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}
		return ba
	}
	ba.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(a.TTL),
			RateLimitStrategy:    strategyProto(a.Strategy),
		}}
	return ba
}

func strategyProto(s alloc.Strategy) *typev3.RateLimitStrategy {
	switch s.Kind {
	case alloc.TokenBucket:
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     s.MaxTokens,
			TokensPerFill: wrapperspb.UInt32(s.TokensPerFill),
			FillInterval:  durationpb.New(s.FillInterval),
		}}}
	case alloc.DenyAll:
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}}
}
