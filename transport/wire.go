package transport

// The gRPC hot path decodes the RLS request straight into engine.Request and
// encodes engine.Response straight onto the wire, instead of going through
// the generated protobuf types and the reflection-driven codec: no message
// objects, one string for all of a request's text, a handful of allocations
// per call. Every other message (health, and responses carrying dynamic
// metadata) goes through the standard proto codec. The decoder follows
// protobuf-go's rules exactly (unknown and mistyped fields skipped, repeated
// singular messages merged, UTF-8 checked on strings); a differential fuzz
// test against proto.Unmarshal + toEngineRequest pins that.

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicehq/sluice/engine"
)

// wireRequest is a RateLimitRequest decoded by rlsCodec. The arrays hold the
// descriptors and entries of a typical request, so that it is one allocation.
type wireRequest struct {
	engine.Request
	desc    [2]engine.Descriptor
	entries [4]engine.Entry
}

// wireBytes is a message the codec passes as it is: the quota stream's,
// decoded and encoded by hand (rlqswire.go).
type wireBytes []byte

// wireResponse is an engine.Response that rlsCodec encodes as a
// RateLimitResponse. Only responses without dynamic metadata take this form.
type wireResponse engine.Response

// rlsCodec is the server's codec: the RLS messages by hand, the rest by the
// standard proto codec.
type rlsCodec struct{ fallback encoding.CodecV2 }

func newRLSCodec() rlsCodec { return rlsCodec{fallback: encoding.GetCodecV2(protocodec.Name)} }

func (rlsCodec) Name() string { return protocodec.Name }

func (c rlsCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(wireBytes); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	r, ok := v.(*wireResponse)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := r.size()
	// Even small responses come from the pool: gRPC frees the buffer once
	// written, and a decision is all small messages.
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	*buf = r.appendTo((*buf)[:0])
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c rlsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if d, ok := v.(*decodeLater); ok {
		d.err = c.Unmarshal(data, d.v)
		return nil
	}
	if b, ok := v.(*wireBytes); ok {
		*b = data.Materialize()
		return nil
	}
	r, ok := v.(*wireRequest)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		b = data.Materialize()
	}
	return decodeRequestBuf(b, &r.Request, r.desc[:0], r.entries[:0])
}

// errWire is protobuf-go's message for malformed input, so clients see the
// same text as from the standard codec.
var errWire = errors.New("proto: cannot parse invalid wire-format data")

func invalidUTF8(field string) error {
	return fmt.Errorf("proto: field %s contains invalid UTF-8", field)
}

// field is one field of a message in buf: a varint's value in x, a
// length-delimited payload at buf[start:end].
type field struct {
	num        protowire.Number
	typ        protowire.Type
	x          uint64
	start, end int
}

// nextField reads the field at buf[pos:limit] and returns the position after it.
func nextField(buf []byte, pos, limit int) (field, int, error) {
	b := buf[pos:limit]
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num > protowire.MaxValidNumber {
		return field{}, 0, errWire
	}
	f := field{num: num, typ: typ}
	b = b[n:]
	pos += n
	switch typ {
	case protowire.VarintType:
		f.x, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		var v []byte
		v, n = protowire.ConsumeBytes(b)
		if n >= 0 {
			f.end = pos + n
			f.start = f.end - len(v)
		}
	default:
		n = protowire.ConsumeFieldValue(num, typ, b)
	}
	if n < 0 {
		return field{}, 0, errWire
	}
	return f, pos + n, nil
}

// fields walks the fields of buf[pos:end]: for it.next() { use it.f }, then
// it.err tells whether the framing was bad. A value, not a closure: the
// decode loops are the hot path.
type fields struct {
	buf      []byte
	pos, end int
	f        field
	err      error
}

func (it *fields) next() bool {
	if it.pos >= it.end || it.err != nil {
		return false
	}
	it.f, it.pos, it.err = nextField(it.buf, it.pos, it.end)
	return it.err == nil
}

// is reports whether f is field num of the expected wire type. protobuf-go
// treats a field of another wire type as unknown and skips it.
func (f field) is(num protowire.Number, typ protowire.Type) bool { return f.num == num && f.typ == typ }

// decodeRequest decodes an envoy.service.ratelimit.v3.RateLimitRequest into
// out. All strings share one copy of buf, so buf may be reused afterwards.
func decodeRequest(buf []byte, out *engine.Request) error {
	return decodeRequestBuf(buf, out, nil, nil)
}

// decodeRequestBuf is decodeRequest using desc and entries when they are
// large enough.
func decodeRequestBuf(buf []byte, out *engine.Request, desc []engine.Descriptor, entries []engine.Entry) error {
	// Pass 1 checks the framing and counts, so that pass 2 allocates once.
	var nDesc, nEntries int
	top := fields{buf: buf, end: len(buf)}
	for top.next() {
		if !top.f.is(2, protowire.BytesType) {
			continue
		}
		nDesc++
		in := fields{buf: buf, pos: top.f.start, end: top.f.end}
		for in.next() {
			if in.f.is(1, protowire.BytesType) {
				nEntries++
			}
		}
		if in.err != nil {
			return in.err
		}
	}
	if top.err != nil {
		return top.err
	}
	d := decoder{buf: buf, text: string(buf)}
	if cap(desc) < nDesc {
		desc = make([]engine.Descriptor, 0, nDesc)
	}
	*out = engine.Request{Descriptors: desc[:0:nDesc]}
	if nEntries > cap(entries) {
		entries = make([]engine.Entry, 0, nEntries)
	}
	d.entries = entries[:0:nEntries]
	// The framing was checked in pass 1.
	for it := (fields{buf: buf, end: len(buf)}); it.next(); {
		switch f := it.f; {
		case f.is(1, protowire.BytesType):
			if out.Domain = d.text[f.start:f.end]; !utf8.ValidString(out.Domain) {
				return invalidUTF8("envoy.service.ratelimit.v3.RateLimitRequest.domain")
			}
		case f.is(2, protowire.BytesType):
			out.Descriptors = append(out.Descriptors, engine.Descriptor{})
			if err := d.descriptor(f.start, f.end, &out.Descriptors[len(out.Descriptors)-1]); err != nil {
				return err
			}
		case f.is(3, protowire.VarintType):
			out.HitsAddend = uint32(f.x)
		}
	}
	return nil
}

type decoder struct {
	buf     []byte
	text    string         // one copy of buf: every decoded string is a slice of it
	entries []engine.Entry // backing array of every descriptor's entries
}

// descriptor decodes an envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.
func (d *decoder) descriptor(start, end int, out *engine.Descriptor) error {
	first := len(d.entries)
	for it := (fields{buf: d.buf, pos: start, end: end}); it.next(); {
		switch f := it.f; {
		case f.is(1, protowire.BytesType):
			var e engine.Entry
			if err := d.entry(f.start, f.end, &e); err != nil {
				return err
			}
			d.entries = append(d.entries, e)
		case f.is(2, protowire.BytesType):
			// A repeated singular message merges into the one before.
			if out.Limit == nil {
				out.Limit = new(engine.LimitOverride)
			}
			if err := d.override(f.start, f.end, out.Limit); err != nil {
				return err
			}
		case f.is(3, protowire.BytesType):
			if out.HitsAddend == nil {
				out.HitsAddend = new(uint64)
			}
			if err := d.wrapper(f.start, f.end, out.HitsAddend, false); err != nil {
				return err
			}
		}
	}
	if n := len(d.entries) - first; n > 0 {
		out.Entries = d.entries[first:len(d.entries):len(d.entries)]
	}
	return nil
}

func (d *decoder) entry(start, end int, out *engine.Entry) error {
	it := fields{buf: d.buf, pos: start, end: end}
	for it.next() {
		f := it.f
		switch {
		case f.is(1, protowire.BytesType):
			if out.Key = d.text[f.start:f.end]; !utf8.ValidString(out.Key) {
				return invalidUTF8("envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry.key")
			}
		case f.is(2, protowire.BytesType):
			if out.Value = d.text[f.start:f.end]; !utf8.ValidString(out.Value) {
				return invalidUTF8("envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry.value")
			}
		}
	}
	return it.err
}

// override decodes a RateLimitOverride (unit_multiplier is parsed for
// errors, as protobuf-go does, and not kept: the engine has no use for it).
func (d *decoder) override(start, end int, out *engine.LimitOverride) error {
	it := fields{buf: d.buf, pos: start, end: end}
	for it.next() {
		f := it.f
		switch {
		case f.is(1, protowire.VarintType):
			out.RequestsPerUnit = uint32(f.x)
		case f.is(2, protowire.VarintType):
			out.Unit = engine.Unit(int32(f.x))
		case f.is(3, protowire.BytesType):
			var ignored uint64
			if err := d.wrapper(f.start, f.end, &ignored, true); err != nil {
				return err
			}
		}
	}
	return it.err
}

// wrapper decodes a google.protobuf.UInt64Value (or UInt32Value).
func (d *decoder) wrapper(start, end int, out *uint64, is32 bool) error {
	it := fields{buf: d.buf, pos: start, end: end}
	for it.next() {
		f := it.f
		if f.is(1, protowire.VarintType) {
			*out = f.x
			if is32 {
				*out = uint64(uint32(f.x))
			}
		}
	}
	return it.err
}

// size is the encoded length of the response.
func (r *wireResponse) size() int {
	n := 0
	if r.OverallCode != 0 {
		n += 1 + protowire.SizeVarint(uint64(r.OverallCode))
	}
	for i := range r.Statuses {
		n += 1 + sizeBytes(statusSize(&r.Statuses[i]))
	}
	for _, h := range r.Headers {
		n += 1 + sizeBytes(headerSize(h))
	}
	return n
}

func sizeBytes(n int) int { return protowire.SizeVarint(uint64(n)) + n }

func statusSize(st *engine.DescriptorStatus) int {
	n := 0
	if st.Code != 0 {
		n += 1 + protowire.SizeVarint(uint64(st.Code))
	}
	if l := st.CurrentLimit; l != nil {
		n += 1 + sizeBytes(limitSize(l))
	}
	if st.LimitRemaining != 0 {
		n += 1 + protowire.SizeVarint(uint64(st.LimitRemaining))
	}
	if st.DurationUntilReset > 0 {
		n += 1 + sizeBytes(durationSize(st.DurationUntilReset))
	}
	return n
}

func limitSize(l *engine.CurrentLimit) int {
	n := 0
	if l.RequestsPerUnit != 0 {
		n += 1 + protowire.SizeVarint(uint64(l.RequestsPerUnit))
	}
	if l.Unit != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(l.Unit)))
	}
	if l.Name != "" {
		n += 1 + sizeBytes(len(l.Name))
	}
	return n
}

func durationSize(d time.Duration) int {
	sec, nanos := durationParts(d)
	n := 0
	if sec != 0 {
		n += 1 + protowire.SizeVarint(uint64(sec))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(nanos)))
	}
	return n
}

// durationParts splits d as durationpb.New does.
func durationParts(d time.Duration) (int64, int32) {
	return int64(d / time.Second), int32(d % time.Second)
}

// appendDuration appends d's length and a google.protobuf.Duration, as
// durationpb.New makes it.
func appendDuration(b []byte, d time.Duration) []byte {
	b = protowire.AppendVarint(b, uint64(durationSize(d)))
	sec, nanos := durationParts(d)
	if sec != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(sec))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(nanos)))
	}
	return b
}

func headerSize(h engine.Header) int {
	n := 0
	if h.Key != "" {
		n += 1 + sizeBytes(len(h.Key))
	}
	if h.Value != "" {
		n += 1 + sizeBytes(len(h.Value))
	}
	return n
}

// appendTo encodes the response as an envoy.service.ratelimit.v3.RateLimitResponse,
// fields in number order as protobuf-go writes them.
func (r *wireResponse) appendTo(b []byte) []byte {
	if r.OverallCode != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.OverallCode))
	}
	for i := range r.Statuses {
		st := &r.Statuses[i]
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(statusSize(st)))
		if st.Code != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(st.Code))
		}
		if l := st.CurrentLimit; l != nil {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(limitSize(l)))
			if l.RequestsPerUnit != 0 {
				b = protowire.AppendTag(b, 1, protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(l.RequestsPerUnit))
			}
			if l.Unit != 0 {
				b = protowire.AppendTag(b, 2, protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(int64(l.Unit)))
			}
			if l.Name != "" {
				b = protowire.AppendTag(b, 3, protowire.BytesType)
				b = protowire.AppendString(b, l.Name)
			}
		}
		if st.LimitRemaining != 0 {
			b = protowire.AppendTag(b, 3, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(st.LimitRemaining))
		}
		if d := st.DurationUntilReset; d > 0 {
			b = protowire.AppendTag(b, 4, protowire.BytesType)
			b = appendDuration(b, d)
		}
	}
	for _, h := range r.Headers {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(headerSize(h)))
		if h.Key != "" {
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendString(b, h.Key)
		}
		if h.Value != "" {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendString(b, h.Value)
		}
	}
	return b
}

// serviceDesc is the RateLimitService as the generated code describes it,
// with a handler that decodes into a wireRequest.
func (s *rlsServer) serviceDesc() *grpc.ServiceDesc {
	desc := rlsv3.RateLimitService_ServiceDesc
	desc.HandlerType = (*interface {
		wireDecide(context.Context, *wireRequest) (any, error)
	})(nil)
	desc.Methods = []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: rlsHandler}}
	return &desc
}

func rlsHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*rlsServer)
	in := new(wireRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return s.wireDecide(ctx, in)
	}
	return interceptor(ctx, in, s.info, s.handler)
}

// wireDecide is ShouldRateLimit on the hand-coded messages.
func (s *rlsServer) wireDecide(ctx context.Context, in *wireRequest) (any, error) {
	return s.wireAnswer(s.decider.ShouldRateLimit(ctx, &in.Request))
}

// wireAnswer is the gRPC answer to a decision: the response to encode, or
// the call's status.
func (s *rlsServer) wireAnswer(r *engine.Response, err error) (any, error) {
	if err != nil {
		s.errs.warn(err)
		return nil, status.Error(grpcCode(err), err.Error())
	}
	if r.DynamicMetadata != nil {
		resp, err := toProtoResponse(r)
		if err != nil {
			s.log.Warn("error: " + err.Error())
			return nil, status.Error(codes.Internal, err.Error())
		}
		return resp, nil
	}
	return (*wireResponse)(r), nil
}
