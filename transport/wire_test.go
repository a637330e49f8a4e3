package transport

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/engine"
)

// viaProto is the reference decoding: protobuf-go, then toEngineRequest.
func viaProto(b []byte) (*engine.Request, error) {
	var m rlsv3.RateLimitRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return toEngineRequest(&m), nil
}

// sameRequest compares two decodings, an empty descriptor list equal to none.
func sameRequest(a, b *engine.Request) bool {
	if a.Domain != b.Domain || a.HitsAddend != b.HitsAddend || len(a.Descriptors) != len(b.Descriptors) {
		return false
	}
	for i := range a.Descriptors {
		if !reflect.DeepEqual(a.Descriptors[i], b.Descriptors[i]) {
			return false
		}
	}
	return true
}

// checkDecode fails unless decodeRequest and protobuf-go agree on b: both
// reject it, or both give the same request.
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	want, werr := viaProto(b)
	var got engine.Request
	gerr := decodeRequest(b, &got)
	switch {
	case (werr == nil) != (gerr == nil):
		t.Fatalf("% x: protobuf-go error %v, ours %v", b, werr, gerr)
	case werr == nil && !sameRequest(&got, want):
		t.Fatalf("% x:\n ours   %+v\n protobuf-go %+v", b, got, *want)
	}
}

func TestDecodeRequestMatchesProtobuf(t *testing.T) {
	entry := func(k, v string) *ratelimitv3.RateLimitDescriptor_Entry {
		return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	for _, tc := range []struct {
		name string
		msg  *rlsv3.RateLimitRequest
	}{
		{"empty", &rlsv3.RateLimitRequest{}},
		{"one descriptor", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("k", "v")}}}}},
		{"three descriptors, nested entries, hits", &rlsv3.RateLimitRequest{Domain: "édge", HitsAddend: 7, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("a", "1"), entry("b", "")}},
			{},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("", "x")},
				Limit:      &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 42, Unit: typev3.RateLimitUnit_DAY, UnitMultiplier: wrapperspb.UInt32(3)},
				HitsAddend: wrapperspb.UInt64(1 << 40), IsNegativeHits: true},
		}}},
		{"zero hits addend wrapper", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("k", "v")}, HitsAddend: wrapperspb.UInt64(0), Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			checkDecode(t, b)
		})
	}
	var tag = func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	var str = func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(tag(b, num, protowire.BytesType), s)
	}
	var msg = func(b []byte, num protowire.Number, inner []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), inner)
	}
	var varint = func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(b, num, protowire.VarintType), v)
	}
	desc := msg(nil, 1, str(str(nil, 1, "k"), 2, "v"))
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"unknown fields everywhere", varint(msg(str(varint(nil, 99, 5), 1, "d"), 2, str(desc, 77, "zz")), 100, 1)},
		{"domain twice: the last wins", str(str(nil, 1, "first"), 1, "second")},
		{"domain as a varint is skipped", varint(nil, 1, 3)},
		{"descriptors as a varint is skipped", varint(nil, 2, 3)},
		{"hits as bytes is skipped", str(nil, 3, "x")},
		{"hits wider than 32 bits truncates", varint(nil, 3, 1<<33+5)},
		{"limit twice merges", msg(nil, 2, msg(msg(nil, 2, varint(nil, 1, 10)), 2, varint(nil, 2, 3)))},
		{"hits wrapper twice merges", msg(nil, 2, msg(msg(nil, 3, varint(nil, 1, 10)), 3, nil))},
		{"negative unit", msg(nil, 2, msg(nil, 2, varint(nil, 2, ^uint64(0))))},
		{"fixed32 and fixed64 unknown fields", protowire.AppendFixed64(tag(protowire.AppendFixed32(tag(nil, 5, protowire.Fixed32Type), 1), 6, protowire.Fixed64Type), 2)},
		{"a group", tag(varint(tag(nil, 9, protowire.StartGroupType), 1, 1), 9, protowire.EndGroupType)},
		{"truncated", str(nil, 1, "domain")[:4]},
		{"truncated inside a descriptor", msg(nil, 2, desc[:len(desc)-1])},
		{"field number zero", varint(nil, 0, 1)},
		{"bad varint", []byte{0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"invalid UTF-8 in the domain", str(nil, 1, "\xff")},
		{"invalid UTF-8 in a value", msg(nil, 2, msg(nil, 1, str(nil, 2, "a\xc0")))},
		{"invalid UTF-8 in an unknown field is fine", str(nil, 50, "\xff")},
		{"broken unit multiplier", msg(nil, 2, msg(nil, 2, msg(nil, 3, []byte{0x08})))},
		{"unmatched end group", tag(nil, 4, protowire.EndGroupType)},
	} {
		t.Run(tc.name, func(t *testing.T) { checkDecode(t, tc.b) })
	}
}

// TestDecodeRequestStringsOutliveTheBuffer: the decoded strings do not alias
// the gRPC buffer, which is recycled after the call.
func TestDecodeRequestStringsOutliveTheBuffer(t *testing.T) {
	b, _ := proto.Marshal(rlsReqMsg("dom", "key", "value"))
	var r engine.Request
	if err := decodeRequest(b, &r); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'X'
	}
	if r.Domain != "dom" || r.Descriptors[0].Entries[0] != (engine.Entry{Key: "key", Value: "value"}) {
		t.Fatalf("decoded request changed with its buffer: %+v", r)
	}
}

func rlsReqMsg(domain, k, v string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}}}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, m := range []*rlsv3.RateLimitRequest{
		{},
		rlsReqMsg("d", "k", "v"),
		{Domain: "x", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 2}, HitsAddend: wrapperspb.UInt64(9)}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x02, 0x0a, 0x00})
	f.Add([]byte{0x0a, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, b) })
}

// checkEncode fails unless the hand-coded response is byte for byte what
// protobuf-go writes for toProtoResponse's message.
func checkEncode(t *testing.T, r *engine.Response) {
	t.Helper()
	m, err := toProtoResponse(r)
	if err != nil {
		t.Fatal(err)
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	w := (*wireResponse)(r)
	got := w.appendTo(nil)
	if len(got) != w.size() {
		t.Fatalf("size() = %d, encoded %d bytes", w.size(), len(got))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("response %+v:\n ours        % x\n protobuf-go % x", r, got, want)
	}
	// Through the codec, as gRPC calls it.
	data, err := newRLSCodec().Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Free()
	if !bytes.Equal(data.Materialize(), want) {
		t.Fatalf("codec output differs from appendTo")
	}
}

func TestEncodeResponseMatchesProtobuf(t *testing.T) {
	for _, r := range []*engine.Response{
		{},
		{OverallCode: engine.CodeOK, Statuses: []engine.DescriptorStatus{{Code: engine.CodeOK}}},
		{OverallCode: engine.CodeOverLimit, Statuses: []engine.DescriptorStatus{
			{Code: engine.CodeOverLimit, CurrentLimit: &engine.CurrentLimit{RequestsPerUnit: 10, Unit: engine.UnitMinute, Name: "named"}, LimitRemaining: 0, DurationUntilReset: 56 * time.Second},
			{Code: engine.CodeOK, CurrentLimit: &engine.CurrentLimit{}, LimitRemaining: 1 << 31, DurationUntilReset: 1500 * time.Millisecond},
			{Code: engine.CodeOK, DurationUntilReset: 3 * time.Nanosecond},
		}, Headers: []engine.Header{{Key: "RateLimit-Limit", Value: "10, 10;w=60"}, {Key: "", Value: ""}, {Key: "k", Value: ""}}},
		{OverallCode: engine.CodeOK, Statuses: []engine.DescriptorStatus{{Code: engine.CodeOK, CurrentLimit: &engine.CurrentLimit{Name: strings.Repeat("n", 2000)}}}},
	} {
		checkEncode(t, r)
	}
}

func FuzzEncodeResponse(f *testing.F) {
	f.Add(int32(1), int32(2), uint32(10), int32(3), "name", uint32(5), int64(time.Second), "k", "v", true)
	f.Add(int32(0), int32(0), uint32(0), int32(0), "", uint32(0), int64(0), "", "", false)
	f.Fuzz(func(t *testing.T, overall, code int32, rpu uint32, unit int32, name string, remaining uint32, reset int64, hk, hv string, withLimit bool) {
		if !utf8Valid(name, hk, hv) {
			t.Skip("protobuf-go refuses to marshal invalid UTF-8; the engine never makes it")
		}
		st := engine.DescriptorStatus{Code: engine.Code(code), LimitRemaining: remaining, DurationUntilReset: time.Duration(reset)}
		if withLimit {
			st.CurrentLimit = &engine.CurrentLimit{RequestsPerUnit: rpu, Unit: engine.Unit(unit), Name: name}
		}
		checkEncode(t, &engine.Response{OverallCode: engine.Code(overall), Statuses: []engine.DescriptorStatus{st, {}},
			Headers: []engine.Header{{Key: hk, Value: hv}}})
	})
}

func utf8Valid(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// TestCodecFallsBackToProtobuf: messages other than the RLS pair (health)
// go through the standard codec.
func TestCodecFallsBackToProtobuf(t *testing.T) {
	c := newRLSCodec()
	in := rlsReqMsg("d", "k", "v")
	data, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out rlsv3.RateLimitRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data.Materialize())}, &out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, &out) {
		t.Fatalf("round trip: %v", &out)
	}
	var w wireRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data.Materialize()[:3]), mem.SliceBuffer(data.Materialize()[3:])}, &w); err != nil {
		t.Fatal(err)
	}
	if w.Domain != "d" || w.Descriptors[0].Entries[0].Value != "v" {
		t.Fatalf("split buffer decoded as %+v", w.Request)
	}
}
