package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/engine/stats"
)

type discardSink struct{}

func (discardSink) Push([]Action) {}

// TestStreamKeepsNoLargeScratch: a stream's report is split per shard in
// a scratch it reuses; after a report larger than keptChunk per shard the
// scratch is dropped, not kept for the stream's life (a flood of a
// thousand streams that each subscribed 1,000 buckets kept 64 MB of it).
func TestStreamKeepsNoLargeScratch(t *testing.T) {
	st0 := stats.NewStore()
	cfg, err := engine.LoadConfig([]engine.ConfigFile{{Name: "rules.yaml", YAML: []byte("domain: q\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000}\n")}}, engine.ConfigOptions{Stats: st0})
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(time.Now)
	defer store.Close()
	eo := engine.DefaultOptions()
	eo.Counter, eo.Stats = engine.DirectCounter{Backend: store}, st0
	eng, err := engine.NewService(eo)
	if err != nil {
		t.Fatal(err)
	}
	eng.SetConfig(cfg)
	o := DefaultOptions()
	o.Shards = 2
	s, err := NewManual(o, eng, eo.Counter, nil, st0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.Open(discardSink{})
	now := time.Unix(1_700_000_000, 0)
	for _, n := range []int{10, 2000, 10} {
		u := make([]Usage, n)
		for i := range u {
			u[i] = Usage{Bucket: alloc.BucketOf(map[string]string{"user": fmt.Sprint(i)})}
		}
		if err := st.Report(now, "q", u); err != nil {
			t.Fatal(err)
		}
		for i, c := range st.chunks {
			if cap(c) > keptChunk {
				t.Errorf("after a report of %d buckets, shard %d's scratch holds %d usages, want at most %d", n, i, cap(c), keptChunk)
			}
		}
	}
}
