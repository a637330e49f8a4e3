package memory_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
	"github.com/sluicehq/sluice/internal/gcfloor"
	"github.com/sluicehq/sluice/internal/testenv"
)

const rssChildEnv = "SLUICE_MEMORY_RSS_CHILD"

// rssCap is the budget the child fills: the smallest default of
// SLUICE_MEMORY_MAX_BYTES.
const rssCap = 64 << 20

// Filled to SLUICE_MEMORY_MAX_BYTES, the process's resident memory grows by
// at most 1.5 × the cap over its idle size. Measured in a fresh process
// (this test binary run again), with the service's GC floor and memory limit
// (as cmd/sluice sets them) and keys made as the engine makes them, until
// the budget refuses new counters.
func TestMemoryRSSWithinCap(t *testing.T) {
	if os.Getenv(rssChildEnv) == "1" {
		fillToCap(t)
		return
	}
	if testing.Short() {
		t.Skip("fills 64 MiB in a child process")
	}
	if raceEnabled {
		t.Skip("the race detector multiplies memory: resident sizes mean nothing under -race")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryRSSWithinCap$", "-test.count=1")
	cmd.Env = append(os.Environ(), rssChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var idle, peak, entries int64
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "rss "); ok {
			if _, err := fmt.Sscanf(rest, "idle=%d peak=%d entries=%d", &idle, &peak, &entries); err != nil {
				t.Fatalf("child line %q: %v", line, err)
			}
		}
	}
	if idle == 0 || peak == 0 {
		t.Fatalf("no measurement from the child:\n%s", out)
	}
	grew := peak - idle
	t.Logf("cap %d MiB: %d counters, RSS %.1f → %.1f MiB (+%.1f MiB, %.2f× the cap)",
		rssCap>>20, entries, mib(idle), mib(peak), mib(grew), float64(grew)/rssCap)
	if limit := int64(rssCap) * 3 / 2; grew > limit {
		t.Fatalf("RSS grew by %.1f MiB filling a %d MiB cap: more than 1.5× (%.1f MiB)", mib(grew), rssCap>>20, mib(limit))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func fillToCap(t *testing.T) {
	defer gcfloor.Start(32 << 20)()
	defer memory.LimitProcess(rssCap)()
	budget := memory.NewBudget(rssCap)
	b := memory.NewWithOptions(memory.Options{Budget: budget})
	defer b.Close()
	runtime.GC()
	idle, err := testenv.RSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	peak := idle
	window := time.Now().Unix() / 60 * 60
	batch := make([]engine.CounterOp, 64)
	var n int64
	for round := 0; ; round++ {
		for i := range batch {
			batch[i] = engine.CounterOp{Key: engineKey(n+int64(i), window), Hits: 1, TTL: time.Hour}
		}
		err := b.Exec(context.Background(), batch)
		if errors.Is(err, memory.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n += int64(len(batch))
		if round%64 == 0 {
			if r, err := testenv.RSS(os.Getpid()); err == nil {
				peak = max(peak, r)
			}
		}
	}
	if r, err := testenv.RSS(os.Getpid()); err == nil {
		peak = max(peak, r)
	}
	fmt.Printf("rss idle=%d peak=%d entries=%d\n", idle, peak, n)
}

// engineKey builds a cache key of the shape and allocation the engine's
// cacheKey gives it: "example_user_<id>_<window>", in a builder grown for
// a 20-digit window.
func engineKey(id, window int64) string {
	var sb strings.Builder
	sb.Grow(len("example_user__") + 16 + 1 + 20)
	sb.WriteString("example_user_")
	sb.WriteString(strconv.FormatInt(id, 36))
	sb.WriteByte('_')
	sb.WriteString(strconv.FormatInt(window, 10))
	return sb.String()
}
