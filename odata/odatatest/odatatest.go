// Package odatatest starts an OData server for tests and benchmarks of
// any package, so none of them copies the listen, serve and shutdown
// steps: Serve runs it on a loopback port until the test ends.
package odatatest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/odata"
)

// Serve starts an odata.Server over store and keys on a free loopback
// port and shuts it down (waiting for its responses, 10 s at most) when t
// ends. It returns the server and the URL of its root
// (http://127.0.0.1:port/v1/odata/v4).
func Serve(t testing.TB, opts odata.Options, store odata.Store, keys odata.KeyStore, lim odata.RateLimiter) (*odata.Server, string) {
	t.Helper()
	srv, err := odata.NewServer(opts, store, keys, lim)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("odata shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("odata serve: %v", err)
		}
	})
	return srv, "http://" + ln.Addr().String() + opts.Root
}
