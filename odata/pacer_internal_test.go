package odata

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Anonymous callers from many addresses (each its own caller, 8 waiting
// apiece) fill their room of the pacing queue, and a key sending 6 at once
// still gets all 6 queued. They used to fill the one shared queue of 1,024
// and the key lost requests to 429 queue_full.
func TestAnonymousCannotFillKeysQueue(t *testing.T) {
	o := DefaultOptions() // PaceQueue 8, PaceQueueTotal 1024
	tr := newTurns(o)
	deadline := time.Now().Add(time.Hour)
	never := func() <-chan struct{} { return nil }
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := map[string]int{}
	take := func(caller string) {
		defer wg.Done()
		_, err := tr.take(caller, deadline, never)
		if err == nil {
			return // held the turn: it is released by the close below
		}
		mu.Lock()
		refused[caller[:3]] += map[bool]int{true: 1}[errors.Is(err, errQueueFull)]
		mu.Unlock()
	}
	// 200 addresses × (1 holding + 8 waiting) anonymous requests: more
	// than the whole queue.
	for a := range 200 {
		for range 9 {
			wg.Add(1)
			go take(fmt.Sprintf("origin:https://app.example.org@198.18.%d.%d", a/250, a%250))
		}
	}
	testenv.Eventually(t, "the anonymous flood to fill its room", func() bool {
		mu.Lock()
		defer mu.Unlock()
		total, _ := tr.queued()
		return total+refused["ori"] == 200*8
	})
	anonQueued, _ := tr.queued()
	for range 6 {
		wg.Add(1)
		go take("key:42")
	}
	testenv.Eventually(t, "the key's 6 requests to hold the turn or wait", func() bool {
		mu.Lock()
		defer mu.Unlock()
		total, _ := tr.queued()
		return total+refused["key"] == anonQueued+5
	})
	tr.close()
	wg.Wait()
	t.Logf("anonymous: %d queued, %d refused queue_full; key: %d of 6 refused", anonQueued, refused["ori"], refused["key"])
	if refused["key"] != 0 {
		t.Fatalf("the key lost %d of 6 to queue_full under an anonymous flood", refused["key"])
	}
	if anonQueued > o.PaceQueueTotal/2 {
		t.Fatalf("anonymous callers hold %d places, more than their room of %d", anonQueued, o.PaceQueueTotal/2)
	}
}
