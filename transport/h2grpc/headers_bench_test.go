package h2grpc

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// BenchmarkRequestHeaders decodes the header block of a rate limit call as
// Envoy sends it, once its fields are in the HPACK table: what every call
// costs the reader before it opens the stream.
func BenchmarkRequestHeaders(b *testing.B) {
	s, err := NewServer(Options{Methods: map[string]Method{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit": echo}})
	if err != nil {
		b.Fatal(err)
	}
	c := newConn(s, nil)
	c.dec = hpack.NewDecoder(4096, c.onField)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	block := func() []byte {
		hb.Reset()
		for _, f := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
			{":authority", "ratelimit"}, {"content-type", "application/grpc"}, {"te", "trailers"},
			{"grpc-timeout", "20m"}, {"user-agent", "envoy/1.36.0"}, {"x-envoy-internal", "true"},
			{"x-envoy-expected-rq-timeout-ms", "20"}, {"x-request-id", "0e8c3b1a-7b0f-4c39-9f0e-3f3c2b9a1d2e"},
		} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	if _, err := c.dec.Write(block()); err != nil { // fills the table
		b.Fatal(err)
	}
	second := block()
	b.ReportAllocs()
	for b.Loop() {
		c.hdr = reqHeaders{}
		c.hdrSize = 0
		if _, err := c.dec.Write(second); err != nil {
			b.Fatal(err)
		}
	}
}
