package quota

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

// TestWindowsKeepOnlyWhatCounts: a window's state goes once it holds
// nothing, asks for nothing and was not refused lately, and the hub then
// keeps no array at all.
func TestWindowsKeepOnlyWhatCounts(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var ws windows
	ws.at(10).inflight = 5
	ws.at(20).held = 3
	ws.at(30).full = t0
	ws.at(10).inflight -= 5
	if ws.at(40) != &ws[3] || len(ws) != 4 {
		t.Fatalf("at added %v", ws)
	}
	ws.tidy()
	if len(ws) != 2 || ws.get(20) == nil || ws.get(30) == nil || ws.get(10) != nil {
		t.Fatalf("after tidy: %+v, want the held and the refused windows", ws)
	}
	if !ws.holds() || ws.busy() {
		t.Fatalf("holds %v busy %v, want true false", ws.holds(), ws.busy())
	}
	if !ws.refusedLately(30, t0.Add(alloc.RetryShort-1)) || ws.refusedLately(30, t0.Add(alloc.RetryShort)) || ws.refusedLately(20, t0) {
		t.Fatal("refusedLately is not 'refused at 30 within RetryShort'")
	}
	ws.get(20).held = 0
	ws.get(30).full = time.Time{}
	ws.tidy()
	if ws != nil {
		t.Fatalf("a hub at rest keeps %+v (cap %d)", ws, cap(ws))
	}
}
