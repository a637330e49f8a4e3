package quota

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/engine/stats"
)

// TestAckConfirmsTheCutHubs: a stream's first acknowledgement looks at
// every hub of it; later ones at the hubs where its buckets were cut
// since (noteCut), and confirm exactly what looking at every hub would:
// each cut at or before the acknowledged time ends a delivery after the
// acknowledgement, and a cut after it waits for a later one. A list grown
// past its bound is dropped, and the next acknowledgement looks at every
// hub again.
func TestAckConfirmsTheCutHubs(t *testing.T) {
	o := DefaultOptions()
	sh := &shard{s: &Service{st: newMetrics(stats.NewStore()), o: o}, hubs: map[string]*hub{},
		byStream: map[*Stream][]*hub{}, acks: map[*Stream][]cutAt{}}
	st := &Stream{}
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s int) int64 { return t0.Add(time.Duration(s) * time.Second).UnixNano() }
	far := at(3600)
	hubs := make([]*hub, 4)
	for i := range hubs {
		hubs[i] = &hub{key: string(rune('a' + i)), reps: []alloc.Reporter{{Live: true}}, meta: []repMeta{{st: st}}}
	}
	sh.byStream[st] = hubs
	cut := func(h *hub, s int) {
		h.reps[0].Segs = append(h.reps[0].Segs, alloc.Seg{From: at(0), Until: far, Cut: at(s)})
	}
	until := func(h *hub) int64 { return h.reps[0].Segs[len(h.reps[0].Segs)-1].Until }
	ended := func(ack int) int64 { return at(ack) + int64(o.Alloc.Delivery) }

	// First acknowledgement, up to 10 s: hub a (cut at 5 s) is confirmed;
	// hub b (cut at 20 s) waits for a later one.
	cut(hubs[0], 5)
	cut(hubs[1], 20)
	sh.acked(st, time.Unix(0, at(10)), time.Unix(0, at(11)))
	if got, want := until(hubs[0]), ended(11); got != want {
		t.Fatalf("hub a's cut at 5 s: until %d, want %d (a delivery after the acknowledgement)", got, want)
	}
	if until(hubs[1]) != far {
		t.Fatal("hub b's cut at 20 s was confirmed by an acknowledgement up to 10 s")
	}

	// Cuts noted since: hub c at 25 s. Hub d is cut unnoted: a later
	// acknowledgement does not look at it (only a planner's cut is noted,
	// and every one is), which shows it reads the list.
	cut(hubs[2], 25)
	sh.noteCut(st, hubs[2], at(25))
	cut(hubs[3], 26)
	sh.acked(st, time.Unix(0, at(30)), time.Unix(0, at(31)))
	for _, h := range hubs[1:3] {
		if got, want := until(h), ended(31); got != want {
			t.Errorf("hub %s: until %d, want %d", h.key, got, want)
		}
	}
	if until(hubs[3]) != far {
		t.Error("hub d, never noted, was looked at: the acknowledgement scanned every hub")
	}
	if n := len(sh.acks[st]); n != 0 {
		t.Errorf("%d cuts kept after an acknowledgement past all of them", n)
	}

	// Acknowledgements stop coming: the list stops at its bound and the
	// next acknowledgement looks at every hub (hub d's cut at last).
	for range 2*len(hubs) + 64 + 1 {
		sh.noteCut(st, hubs[2], at(40))
	}
	if cuts, tracked := sh.acks[st]; tracked || len(cuts) != 0 {
		t.Fatalf("past its bound the list holds %d cuts (tracking %v), want none and a full look", len(cuts), tracked)
	}
	sh.acked(st, time.Unix(0, at(50)), time.Unix(0, at(51)))
	if got, want := until(hubs[3]), ended(51); got != want {
		t.Errorf("hub d after the list was dropped: until %d, want %d", got, want)
	}
	sh.closeStream(st, true, t0)
	if _, ok := sh.acks[st]; ok {
		t.Error("a closed stream's acknowledgement list is kept")
	}
}

// TestAckNeverWaitsForAFullLane: an acknowledgement comes from the
// stream's transport loop, which writes the stream's answers; where the
// stream's lane is full (its receiver handing a large report over), it is
// dropped rather than waited for, and the loop goes on writing.
func TestAckNeverWaitsForAFullLane(t *testing.T) {
	o := DefaultOptions()
	o.Shards = 1
	s, err := newService(o, nil, nil, nil, stats.NewStore(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.manual = false
	sh := s.shards[0]
	sh.in = newIntake(time.Now)
	st := s.Open(discardSink{})
	st.touched[0].Store(true)
	for range laneSize {
		if ok, _ := sh.in.put(msg{kind: msgReport, st: st}); !ok {
			t.Fatal("lane full before laneSize messages")
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		now := time.Now()
		st.Acked(now, now)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Acked waited 5 s for room in the stream's full lane")
	}
	if n := len(sh.in.lanes[st].q); n != laneSize {
		t.Errorf("lane holds %d messages, want the %d reports (the acknowledgement dropped)", n, laneSize)
	}
}
