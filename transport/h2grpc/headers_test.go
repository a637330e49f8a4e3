package h2grpc

import (
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// block sends a HEADERS frame with exactly fields, in order ("name",
// "value", ...).
func (r *raw) block(id uint32, end bool, prio *http2.PriorityParam, fields ...string) {
	r.t.Helper()
	r.hb.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		r.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	p := http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hb.Bytes(), EndHeaders: true, EndStream: end}
	if prio != nil {
		p.Priority = *prio
	}
	if err := r.fr.WriteHeaders(p); err != nil {
		r.t.Fatal(err)
	}
}

// grpcFields are the fields of a well-formed call to /t.S/Echo.
func grpcFields(extra ...string) []string {
	return append([]string{":method", "POST", ":scheme", "http", ":path", "/t.S/Echo", ":authority", "x", "content-type", "application/grpc", "te", "trailers"}, extra...)
}

// TestMalformedRequests: a request RFC 9113 sections 8.2 and 8.3 call
// malformed is a stream error, RST_STREAM(PROTOCOL_ERROR) with no answer,
// and the connection serves the next call.
func TestMalformedRequests(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}})
	for _, c := range []struct {
		name   string
		fields []string
		data   []byte // DATA sent after the headers, ending the stream
		prio   *http2.PriorityParam
	}{
		{name: "uppercase name", fields: grpcFields("X-Upper", "1")},
		{name: "space in name", fields: grpcFields("x y", "1")},
		{name: "colon in name", fields: grpcFields("x:y", "1")},
		{name: "non-ASCII name", fields: grpcFields("x\xffy", "1")},
		{name: "NUL in value", fields: grpcFields("x-v", "a\x00b")},
		{name: "CR in value", fields: grpcFields("x-v", "a\rb")},
		{name: "LF in value", fields: grpcFields("x-v", "a\nb")},
		{name: "leading space in value", fields: grpcFields("x-v", " a")},
		{name: "trailing tab in value", fields: grpcFields("x-v", "a\t")},
		{name: "connection header", fields: grpcFields("connection", "keep-alive")},
		{name: "transfer-encoding", fields: grpcFields("transfer-encoding", "chunked")},
		{name: "upgrade", fields: grpcFields("upgrade", "h2c")},
		{name: "te other than trailers", fields: append(grpcFields()[:10:10], "te", "trailers, deflate")},
		{name: "unknown pseudo-header", fields: append(grpcFields()[:8:8], ":test", "x", "content-type", "application/grpc")},
		{name: "response pseudo-header", fields: append(grpcFields()[:8:8], ":status", "200", "content-type", "application/grpc")},
		{name: "pseudo-header after regular", fields: grpcFields(":authority", "y")},
		{name: "duplicated :method", fields: append([]string{":method", "POST"}, grpcFields()...)},
		{name: "duplicated :scheme", fields: append([]string{":scheme", "http"}, grpcFields()...)},
		{name: "duplicated :path", fields: append([]string{":path", "/t.S/Echo"}, grpcFields()...)},
		{name: "no :method", fields: grpcFields()[2:]},
		{name: "no :scheme", fields: append(grpcFields()[:2:2], grpcFields()[4:]...)},
		{name: "no :path", fields: append(grpcFields()[:4:4], grpcFields()[6:]...)},
		{name: "empty :path", fields: append(append(grpcFields()[:4:4], ":path", ""), grpcFields()[6:]...)},
		{name: "relative :path", fields: append(append(grpcFields()[:4:4], ":path", "t.S/Echo"), grpcFields()[6:]...)},
		{name: "content-length not a number", fields: grpcFields("content-length", "-1")},
		{name: "content-length above the DATA", fields: grpcFields("content-length", "9"), data: msg0()},
		{name: "content-length below the DATA", fields: grpcFields("content-length", "2"), data: msg0()},
		{name: "depends on itself", fields: grpcFields(), prio: &http2.PriorityParam{Weight: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			if c.prio != nil {
				c.prio.StreamDep = 1
			}
			r.block(1, false, c.prio, c.fields...)
			if c.data != nil {
				if err := r.fr.WriteData(1, true, c.data); err != nil {
					t.Fatal(err)
				}
			}
			f := r.next(isStream(1))
			if rst, ok := f.(*http2.RSTStreamFrame); !ok || rst.ErrCode != http2.ErrCodeProtocol {
				t.Fatalf("got %v, want RST_STREAM(PROTOCOL_ERROR)", f)
			}
			r.block(3, false, nil, grpcFields()...)
			r.message(3, []byte("ok"))
			if got := r.next(isStream(3)); field(got, ":status") != "200" {
				t.Fatalf("next call: %v", got)
			}
		})
	}
}

// TestWellFormedRequests: what the rules allow is served: metadata of any
// lowercase name, a content-length that matches, values with inner
// spaces, and any order of the regular fields.
func TestWellFormedRequests(t *testing.T) {
	_, addr := serve(t, Options{Methods: map[string]Method{"/t.S/Echo": echo}})
	r := dialRaw(t, addr)
	for i, fields := range [][]string{
		grpcFields("x-envoy-expected-rq-timeout-ms", "20", "user-agent", "grpc-go/1.0 (linux)", "x-bin", "a b"),
		grpcFields("content-length", strconv.Itoa(len(msg0()))),
		grpcFields("grpc-encoding", "identity", "grpc-accept-encoding", "identity,deflate,gzip"),
		{":scheme", "https", ":authority", "x", ":path", "/t.S/Echo", ":method", "POST", "te", "trailers", "content-type", "application/grpc+proto"},
	} {
		id := uint32(2*i + 1)
		r.block(id, false, nil, fields...)
		if err := r.fr.WriteData(id, true, msg0()); err != nil {
			t.Fatal(err)
		}
		_, codes := answers(t, r, id)
		if codes[id] != "0" {
			t.Errorf("%q: grpc-status %q", fields, codes[id])
		}
	}
}

// msg0 is an empty gRPC message.
func msg0() []byte { return []byte{0, 0, 0, 0, 0} }

func TestFieldValidity(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, value string
		ok          bool
	}{
		{"x-a_b.c~1", "v", true},
		{"a", "", true},
		{"a", "in side", true},
		{"a", "\x01tab\tinside\x7f\xff", true}, // only NUL, CR, LF are banned
		{"", "v", false},
		{"A", "v", false},
		{"a b", "v", false},
		{"a\x7f", "v", false},
		{"a:", "v", false},
		{"a", "\x00", false},
		{"a", "x\r\n", false},
		{"a", "\tx", false},
		{"a", "x ", false},
	} {
		if got := validFieldName(c.name) && validFieldValue(c.value); got != c.ok {
			t.Errorf("%q: %q valid = %v, want %v", c.name, c.value, got, c.ok)
		}
	}
}

func FuzzParseContentLength(f *testing.F) {
	for _, s := range []string{"0", "17", "007", "", "-1", "+1", "1e3", " 1", strings.Repeat("9", 18), strings.Repeat("9", 19)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseContentLength(s)
		want, err := strconv.ParseInt(s, 10, 64)
		digits := s != "" && strings.Trim(s, "0123456789") == ""
		switch {
		case ok && (!digits || err != nil || n != want):
			t.Fatalf("%q: %d, want %d (%v)", s, n, want, err)
		case !ok && digits && len(s) <= 18:
			t.Fatalf("%q refused", s)
		case !ok && n != -1:
			t.Fatalf("%q refused with %d", s, n)
		}
	})
}

// FuzzFieldValue: the eight-bytes-at-a-time check says what the rule says.
func FuzzFieldValue(f *testing.F) {
	for _, s := range []string{"", "a", "abcdefgh", "abcdefg\x00", "abcdefghi\r", "\x0dabcdefgh", "a\tb", "12345678\n12345678", " x", "x\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := !strings.ContainsAny(s, "\x00\r\n") && strings.Trim(s, " \t") == s
		if got := validFieldValue(s); got != want {
			t.Fatalf("validFieldValue(%q) = %v, want %v", s, got, want)
		}
	})
}
