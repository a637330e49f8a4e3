package odata_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
)

// Behind a trusted proxy that appends the client's address to
// X-Forwarded-For and passes the client's own Forwarded header through
// (nginx, Envoy and most load balancers), a client rotating Forwarded:
// for= is still one address: its bad keys are throttled and its
// anonymous browser requests paced. Before, Forwarded was preferred and
// the client chose its identity: 30 of 30 bad keys went unthrottled.
func TestForwardedHeaderForgery(t *testing.T) {
	db := openEmpty(t, backends()[0])
	const origin = "https://app.example.org"
	opts := testOptions()
	opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	opts.KeyFailures = 20
	opts.KeyFailureWindow = time.Hour
	opts.CORSOrigins = []string{origin}
	opts.PaceWait = 0 // refused at once rather than waiting its turn
	// A frozen clock: the token bucket (4 at once) refills not at all.
	clock := testenv.NewClock(time.Unix(1_700_000_000, 0))
	lim, err := odata.NewLocalLimiter(odata.LocalLimiterOptions{RequestsPerSecond: 2, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	_, base := startServer(t, db, opts, lim)
	c := newClient(t)
	forged := func(i int) []string {
		return []string{"Forwarded", fmt.Sprintf("for=198.18.%d.%d", i/250, i%250+1), "X-Forwarded-For", "203.0.113.7"}
	}
	throttled := 0
	for i := range 30 {
		r := do(t, c, "GET", base+"/Locations?$top=1", append(forged(i), "x-api-key", fmt.Sprint("bad-", i))...)
		if r.status == 429 {
			throttled++
		}
	}
	if throttled != 10 {
		t.Errorf("bad keys with a forged Forwarded: %d of 30 throttled, want 10 (after 20 failures)", throttled)
	}
	served := 0
	for i := range 40 {
		if r := do(t, c, "GET", base+"/Locations?$top=1", append(forged(i), "Origin", origin)...); r.status == 200 {
			served++
		}
	}
	if served != 4 {
		t.Errorf("anonymous requests with a forged Forwarded: %d of 40 served, want the bucket's 4", served)
	}
	t.Logf("bad keys: %d of 30 throttled; anonymous: %d of 40 served", throttled, served)
}
