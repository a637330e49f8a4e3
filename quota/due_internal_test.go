package quota

import (
	"container/heap"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/stats"
)

// TestDueHeapKeepsOneEntryPerHub: rescheduling a hub moves its entry and
// forgetting it removes it, so the due heap holds the hubs scheduled now
// and no other. Stale entries, skipped only when their time came, kept
// every hub rescheduled or forgotten within the last hour reachable.
func TestDueHeapKeepsOneEntryPerHub(t *testing.T) {
	sh := &shard{s: &Service{st: newMetrics(stats.NewStore())}, hubs: map[string]*hub{}}
	t0 := time.Unix(1_700_000_000, 0)
	hubs := make([]*hub, 100)
	for i := range hubs {
		hubs[i] = &hub{key: fmt.Sprint(i)}
		sh.hubs[hubs[i].key] = hubs[i]
		// A renewal soon, then the hour-away cleanup, then a nearer one.
		sh.schedule(hubs[i], t0.Add(time.Duration(i)*time.Millisecond))
		sh.schedule(hubs[i], t0.Add(time.Hour))
		sh.schedule(hubs[i], t0.Add(time.Duration(1000-i)*time.Millisecond))
	}
	for _, h := range hubs[:50] {
		sh.forget(h)
	}
	if len(sh.due) != 50 {
		t.Fatalf("%d entries in the due heap for 50 scheduled hubs (100 made, 50 forgotten, each scheduled 3 times)", len(sh.due))
	}
	for i, e := range sh.due {
		if e.h.due != i+1 || e.h.gone {
			t.Fatalf("entry %d is hub %s, which says its place is %d (gone %v)", i, e.h.key, e.h.due-1, e.h.gone)
		}
	}
	var last time.Time
	for n := 0; sh.due.Len() > 0; n++ {
		e := heap.Pop(&sh.due).(dueEntry)
		if e.at.Before(last) || e.h.due != 0 {
			t.Fatalf("pop %d: hub %s at %v after %v, its place %d", n, e.h.key, e.at, last, e.h.due)
		}
		if want := hubs[99-n]; e.h != want {
			t.Fatalf("pop %d: hub %s, want %s (its last schedule is the earliest)", n, e.h.key, want.key)
		}
		last = e.at
	}
}
