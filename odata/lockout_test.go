package odata_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/odata"
)

// The probe of a bad-key flood from rotating addresses, through a trusted
// proxy's X-Forwarded-For: 1,400 bad keys from 1,400 IPv4 addresses in
// as many /24 networks, more than the throttle tracks (its table cut from
// 65,536 networks to 1,024 for the test: the same overflow, 50 times
// fewer requests). A valid key from an
// untracked network must still pass; it used to get 429 for the rest of
// the window (the shared overflow count). Before the flood, 70 bad keys
// from 70 addresses of one IPv6 /64 are one caller: 50 are throttled.
func TestBadKeyFloodLocksOutNoValidKey(t *testing.T) {
	db := openEmpty(t, backends()[0])
	key, _, _ := db.AddKey(context.Background(), "k")
	opts := testOptions()
	opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	opts.KeyFailureWindow = time.Hour
	srv, base := startServer(t, db, opts, nil)
	const tracked = 1024
	odata.SetFailTableSize(srv, tracked)
	url := base + "/Locations?$top=1"
	c := newClient(t)
	v6 := 0
	for i := range 70 {
		addr := fmt.Sprintf("2001:db8:7:7:%x::1", i+1)
		if r := do(t, c, "GET", url, "X-Forwarded-For", addr, "x-api-key", fmt.Sprint("bad6-", i)); r.status == 429 {
			v6++
		}
	}
	if v6 != 50 {
		t.Errorf("70 bad keys from one IPv6 /64: %d throttled, want 50 (after 20)", v6)
	}
	const flood, workers = tracked + tracked*3/8, 8
	var next, throttled atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newClient(t)
			for i := next.Add(1) - 1; i < flood; i = next.Add(1) - 1 {
				addr := fmt.Sprintf("%d.%d.%d.9", 20+i/65536, i/256%256, i%256)
				if r := do(t, c, "GET", url, "X-Forwarded-For", addr, "x-api-key", fmt.Sprint("bad-", i)); r.status == 429 {
					throttled.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for _, addr := range []string{"198.51.100.20", "2001:db8:9::1"} {
		if r := do(t, c, "GET", url, "X-Forwarded-For", addr, "x-api-key", key); r.status != 200 {
			t.Errorf("a valid key from the untracked %s after the flood: %d, want 200", addr, r.status)
		}
	}
	t.Logf("flood: %d bad keys from %d networks, %d answered 429; valid keys from untracked networks pass; one /64: %d of 70 throttled",
		flood, flood, throttled.Load(), v6)
}
