package odata

import "testing"

func TestNegotiate(t *testing.T) {
	all := Options{Gzip: true, Brotli: true, Zstd: true}
	gzipOnly := Options{Gzip: true}
	for _, c := range []struct {
		opts   Options
		accept string
		want   string
	}{
		{all, "", ""},
		{all, "gzip", "gzip"},
		{all, "x-gzip", "gzip"},
		{all, "GZIP, BR", "br"},
		{all, "gzip;q=1.0, br;q=0.8", "gzip"},
		{all, "gzip; q=0.3 , zstd ; q=0.4", "zstd"},
		{all, "br;q=0", ""},
		{all, "br;q=bogus", ""},
		{all, "br;q=2", ""},
		{all, "br;q=0.001", ""},
		{all, "br;q=0.001, gzip;q=0", ""},
		{all, "br;q=0.001, gzip;q=0.0001", "br"},
		// br alone is what clients send without decoding it.
		{all, "br", ""},
		{all, "BR;q=1, identity", ""},
		{all, "br, *;q=0", ""},
		{all, "br, *", "br"},
		{all, "br, deflate", "br"},
		{all, "gzip, deflate, br", "br"},
		{all, "gzip, deflate, br, zstd", "br"},
		{all, "br;q=1, zstd;q=0.9", "br"},
		{Options{Gzip: true, Zstd: true}, "gzip, deflate, br, zstd", "zstd"},
		{DefaultOptions(), "br", ""},
		{DefaultOptions(), "gzip, deflate, br", "gzip"},
		{DefaultOptions(), "gzip, deflate, br, zstd", "zstd"},
		{all, "*;q=0", ""},
		{all, "*;q=0.5, gzip;q=0.9", "gzip"},
		{all, "identity;q=0", ""},
		{all, "compress, deflate", ""},
		{all, ",,;q=1,", ""},
		{gzipOnly, "br, zstd, *", "gzip"},
		{gzipOnly, "br, zstd", ""},
		{Options{}, "gzip, br, zstd", ""},
	} {
		if got := c.opts.negotiate(c.accept); got != c.want {
			t.Errorf("%+v %q: %q, want %q", c.opts, c.accept, got, c.want)
		}
	}
}

func FuzzNegotiate(f *testing.F) {
	for _, s := range []string{"gzip", "br;q=0.5, *", "zstd;q=", ";;;", "gzip;q=0.1;q=1"} {
		f.Add(s)
	}
	all := Options{Gzip: true, Brotli: true, Zstd: true}
	f.Fuzz(func(t *testing.T, s string) {
		switch got := all.negotiate(s); got {
		case codingIdentity, codingGzip, codingBrotli, codingZstd:
		default:
			t.Fatalf("%q gave coding %q", s, got)
		}
	})
}
