package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/alloc"
)

type discardSink struct{}

func (discardSink) Push([]Action) {}

// TestStreamKeepsNoLargeScratch: a stream's report is split per shard in
// a scratch it reuses; after a report larger than keptChunk per shard the
// scratch is dropped, not kept for the stream's life (a flood of a
// thousand streams that each subscribed 1,000 buckets kept 64 MB of it).
func TestStreamKeepsNoLargeScratch(t *testing.T) {
	s, _ := internalService(t, 2, true)
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
