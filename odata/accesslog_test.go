package odata_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
)

// lockedBuffer collects log output written from server goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("access line is not JSON: %q", sc.Text())
		}
		out = append(out, m)
	}
	return out
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// One line per request with status, caller (key id, never the secret),
// path, rows, bytes and duration; streamed pages are logged when their
// body ends, with the rows and bytes actually sent.
func TestAccessLog(t *testing.T) {
	var buf lockedBuffer
	opts := testOptions()
	opts.AccessLog = slog.New(slog.NewJSONHandler(&buf, nil))
	e := newEnv(t, backends()[0], smallData, opts, nil)
	keyID := ""
	keys, err := e.db.ListKeys(t.Context())
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys: %v %v", keys, err)
	}
	keyID = keys[0].ID
	c := newClient(t)
	page := e.get(c, e.base+"/Observations?$top=25", "Accept-Encoding", "gzip")
	e.get(c, e.base+"/Observations(3)")
	do(t, c, "GET", e.base+"/Observations?$top=1", "x-api-key", "not-a-key-secret-0123456789")
	do(t, c, "GET", e.base+"/Observations?$top=1")
	e.get(c, e.base+"/Observations?$filter=Nope%20eq%201")
	e.get(c, e.base+"/Records/$count")
	// A key in the query string (answered 401: keys go in the header) and
	// other secret-looking parameters are masked; $skiptoken is not.
	do(t, c, "GET", e.base+"/Locations?api_key=qs-secret-1&$skiptoken=Id:3&Access%5FToken=qs-secret-2&x=1")
	testenv.Eventually(t, "seven access lines", func() bool { return len(buf.lines(t)) == 7 })
	lines := buf.lines(t)
	byPath := map[string]map[string]any{}
	for _, l := range lines {
		if l["msg"] != "access" {
			t.Fatalf("line %v", l)
		}
		for _, k := range []string{"status", "method", "path", "caller", "rows", "bytes", "duration_ms", "remote"} {
			if _, ok := l[k]; !ok {
				t.Fatalf("line lacks %s: %v", k, l)
			}
		}
		byPath[fmt.Sprint(l["path"], " ", l["status"])] = l
	}
	for _, want := range []struct {
		key          string
		caller       string
		rows, nbytes float64
	}{
		{"/v1/odata/v4/Observations?$top=25 200", "key:" + keyID, 25, -1},
		{"/v1/odata/v4/Observations(3) 200", "key:" + keyID, 1, -1},
		{"/v1/odata/v4/Observations?$top=1 403", "-", 0, float64(len(`{"message":"Forbidden"}`))},
		{"/v1/odata/v4/Observations?$top=1 401", "-", 0, float64(len(`{"message":"Unauthorized"}`))},
		{"/v1/odata/v4/Observations?$filter=Nope%20eq%201 400", "key:" + keyID, 0, -1},
		{"/v1/odata/v4/Records/$count 200", "key:" + keyID, 0, float64(len(fmt.Sprint(len(e.data.obs))))},
		{"/v1/odata/v4/Locations?api_key=xxxxx&$skiptoken=Id:3&Access%5FToken=xxxxx&x=1 401", "-", 0, -1},
	} {
		l, ok := byPath[want.key]
		if !ok {
			t.Fatalf("no line for %s in %v", want.key, byPath)
		}
		if l["caller"] != want.caller || l["rows"] != want.rows || (want.nbytes >= 0 && l["bytes"] != want.nbytes) {
			t.Errorf("%s: %v", want.key, l)
		}
	}
	// The streamed page's bytes are what went over the wire (gzip).
	if l := byPath["/v1/odata/v4/Observations?$top=25 200"]; l["bytes"].(float64) <= 0 || l["bytes"].(float64) >= float64(len(page.body)) {
		t.Errorf("page bytes %v, decoded body %d", l["bytes"], len(page.body))
	}
	for _, secret := range []string{e.key, "not-a-key-secret-0123456789", "qs-secret"} {
		if strings.Contains(buf.String(), secret) {
			t.Fatalf("the access log holds a secret")
		}
	}
}

// A flood is held to the budget: with time standing still, exactly the
// burst is written; when time moves, the next line reports how many were
// suppressed, so nothing is lost silently.
func TestAccessLogFlood(t *testing.T) {
	var buf lockedBuffer
	opts := testOptions()
	opts.AccessLog = slog.New(slog.NewJSONHandler(&buf, nil))
	opts.AccessLogPerSecond = 5
	opts.KeyFailures = 0 // the flood is of bad keys; the failed-key throttle would answer 429
	e := newEnv(t, backends()[0], smallData, opts, nil)
	clock := testenv.NewClock(time.Unix(1_700_000_000, 0))
	odata.SetAccessLogClock(e.srv, clock.Now)
	c := newClient(t)
	const flood = 300
	for i := 0; i < flood; i++ {
		if r := do(t, c, "GET", e.base+"/Observations", "x-api-key", "bad"); r.status != 403 {
			t.Fatalf("status %d", r.status)
		}
	}
	if n := len(buf.lines(t)); n != 5 {
		t.Fatalf("%d lines for a flood of %d at a budget of 5", n, flood)
	}
	clock.Add(time.Second)
	do(t, c, "GET", e.base+"/Observations", "x-api-key", "bad")
	lines := buf.lines(t)
	if len(lines) != 6 || lines[5]["suppressed"] != float64(flood-5) {
		t.Fatalf("after the flood: %d lines, last %v", len(lines), lines[len(lines)-1])
	}
}
