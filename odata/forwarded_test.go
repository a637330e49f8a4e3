package odata

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func forwardedCtx(peer string, headers ...string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.SetRequestURI("http://sluice.test/v1/odata/v4/Locations")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(peer), Port: 4711}, nil)
	return ctx
}

// The address per-address state counts: the peer's, unless the peer is a
// trusted proxy; then the right-most untrusted hop of the chain.
func TestClientAddr(t *testing.T) {
	s := &Server{opts: Options{TrustedProxies: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:1::/48")}}}
	untrusting := &Server{}
	for _, tc := range []struct {
		peer    string
		headers []string
		want    string
	}{
		{"192.0.2.1", nil, "192.0.2.1"},
		{"192.0.2.1", []string{"X-Forwarded-For", "198.51.100.9"}, "192.0.2.1"}, // not from a proxy
		{"10.0.0.5", nil, "10.0.0.5"},
		{"10.0.0.5", []string{"X-Forwarded-For", "198.51.100.9"}, "198.51.100.9"},
		{"10.0.0.5", []string{"X-Forwarded-For", "6.6.6.6, 198.51.100.9, 10.0.0.7"}, "198.51.100.9"},
		{"10.0.0.5", []string{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "198.51.100.9"}, "198.51.100.9"},
		{"10.0.0.5", []string{"X-Forwarded-For", "10.0.0.9, 10.0.0.7"}, "10.0.0.9"},
		{"10.0.0.5", []string{"X-Forwarded-For", "198.51.100.9:5555"}, "198.51.100.9"},
		{"10.0.0.5", []string{"X-Forwarded-For", "garbage"}, "10.0.0.5"},
		{"10.0.0.5", []string{"X-Forwarded-For", "6.6.6.6, unknown, 10.0.0.7"}, "10.0.0.7"},
		// The client's own Forwarded, passed through by a proxy that
		// appends to X-Forwarded-For, chooses nothing.
		{"10.0.0.5", []string{"Forwarded", `for=6.6.6.6`, "X-Forwarded-For", "198.51.100.9"}, "198.51.100.9"},
		{"10.0.0.5", []string{"Forwarded", `for=6.6.6.6`}, "10.0.0.5"},
		{"10.0.0.5", []string{"X-Real-IP", "6.6.6.6", "X-Forwarded-For", "198.51.100.9"}, "198.51.100.9"},
		{"2001:db8:1::2", []string{"X-Forwarded-For", "::ffff:198.51.100.9"}, "198.51.100.9"},
		{"::ffff:10.0.0.5", []string{"X-Forwarded-For", "198.51.100.9"}, "198.51.100.9"},
	} {
		if got := s.clientAddr(forwardedCtx(tc.peer, tc.headers...)); got != tc.want {
			t.Errorf("peer %s %v: %s, want %s", tc.peer, tc.headers, got, tc.want)
		}
		if got, want := untrusting.clientAddr(forwardedCtx(tc.peer, tc.headers...)), netip.MustParseAddr(tc.peer).Unmap().String(); got != want {
			t.Errorf("no trusted proxies, peer %s %v: %s", tc.peer, tc.headers, got)
		}
	}
}

// With ForwardedHeader set, that header alone names the chain.
func TestClientAddrNamedHeader(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	fwd := &Server{opts: Options{TrustedProxies: trusted, ForwardedHeader: "Forwarded"}}
	real := &Server{opts: Options{TrustedProxies: trusted, ForwardedHeader: "X-Real-IP"}}
	for _, tc := range []struct {
		s       *Server
		headers []string
		want    string
	}{
		{fwd, []string{"Forwarded", `for=198.51.100.9;proto=https, for="[2001:db8:2::1]:80"`}, "2001:db8:2::1"},
		{fwd, []string{"Forwarded", `for=6.6.6.6, for=198.51.100.9`, "X-Forwarded-For", "7.7.7.7"}, "198.51.100.9"},
		{fwd, []string{"X-Forwarded-For", "7.7.7.7"}, "10.0.0.5"},
		{real, []string{"X-Real-IP", "198.51.100.9", "X-Forwarded-For", "7.7.7.7"}, "198.51.100.9"},
	} {
		if got := tc.s.clientAddr(forwardedCtx("10.0.0.5", tc.headers...)); got != tc.want {
			t.Errorf("%s: %v: %s, want %s", tc.s.opts.ForwardedHeader, tc.headers, got, tc.want)
		}
	}
}

func TestForwardedElements(t *testing.T) {
	els := forwardedElements(`For="[2001:db8:cafe::17]:4711";proto=HTTPS ; host="a\"b", for=192.0.2.43;by=x,,junk;host=h`)
	if len(els) != 3 || els[0]["for"] != "[2001:db8:cafe::17]:4711" || els[0]["proto"] != "HTTPS" || els[0]["host"] != `a"b` ||
		els[1]["for"] != "192.0.2.43" || els[1]["by"] != "x" || els[2]["host"] != "h" {
		t.Fatalf("%q", els)
	}
}

func FuzzForwarded(f *testing.F) {
	for _, s := range []string{`for=1.2.3.4;proto=https`, `for="[::1]:80", for=unknown`, `"`, `=;,=`, `a="\`, `host=x;;;,`} {
		f.Add(s)
	}
	s := &Server{opts: Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
	f.Fuzz(func(t *testing.T, h string) {
		_ = forwardedElements(h)
		ctx := forwardedCtx("10.0.0.1", "Forwarded", h, "X-Forwarded-For", h, "X-Forwarded-Host", h)
		if a := s.clientAddr(ctx); !netip.MustParseAddr(a).IsValid() {
			t.Fatalf("client address %q", a)
		}
		if _, host := s.forwardedView(ctx); host != "" && !validHost(host) {
			t.Fatalf("host %q", host)
		}
	})
}

func TestMaskedURI(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/odata/v4/Locations":                                  "/v1/odata/v4/Locations",
		"/x?api_key=s&$top=1":                                     "/x?api_key=xxxxx&$top=1",
		"/x?$skiptoken=Id:1&token=s&apikey=s&KEY=s":               "/x?$skiptoken=Id:1&token=xxxxx&apikey=xxxxx&KEY=xxxxx",
		"/x?%61pi_key=s&password=&sig=a=b":                        "/x?%61pi_key=xxxxx&password=xxxxx&sig=xxxxx",
		"/x?$filter=CharacteristicName%20eq%20'pH'&x-api-key=sec": "/x?$filter=CharacteristicName%20eq%20'pH'&x-api-key=xxxxx",
		"/x?key&&=v&%zz=1":                                        "/x?key&&=v&%zz=1",
		// The probe's leaks: jwt=, code=, bearer=, ;-separated and path
		// segments.
		"/x?jwt=s&code=s&bearer=s":                        "/x?jwt=xxxxx&code=xxxxx&bearer=xxxxx",
		"/x?$top=1;api_key=s;token=s":                     "/x?$top=1;api_key=xxxxx;token=xxxxx",
		"/v1/odata/v4/Locations;api_key=s":                "/v1/odata/v4/Locations;api_key=xxxxx",
		"/v1/api_key=s/Locations":                         "/v1/api_key=xxxxx/Locations",
		"/v1/token/s3cr3t/Locations":                      "/v1/token/xxxxx/Locations",
		"/x?q=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln":  "/x?q=xxxxx",
		"/v1/eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln/x": "/v1/xxxxx/x",
		"/v1/odata/v4/Locations('key')":                   "/v1/odata/v4/Locations('key')",
	} {
		if got := string(appendMaskedURI(nil, []byte(in))); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func FuzzMaskedURI(f *testing.F) {
	for _, s := range []string{"/x?api_key=s", "/x?a=b&c", "?&&=", "/x?%zz=key"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := string(appendMaskedURI(nil, []byte(s)))
		if strings.Contains(s, "?api_key=SECRET") && strings.Contains(out, "api_key=SECRET") {
			t.Fatalf("%q kept the secret: %q", s, out)
		}
	})
}
