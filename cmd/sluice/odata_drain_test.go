package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// SIGTERM under keep-alive OData load, 6 times, with the CPUs kept busy
// by spinning goroutines: every request a client has written is answered,
// or its connection closed before it was written (a request the client can
// send again); none is written and then lost. fasthttp's own shutdown
// closed every keep-alive connection idle at that instant, and a client
// that had just been answered and was writing its next request lost it:
// 1 to 7 requests in every one of 20 runs, so 6 runs catch it. Each run
// takes its SIGTERM once every client has had 10 answers on its
// keep-alive connection (50 before: the loss is at the shutdown, not in
// the warm-up, and the warm-up was most of a run's 15 s on a busy machine).
func TestODataShutdownUnderKeepAliveLoadBusy(t *testing.T) {
	if testing.Short() {
		t.Skip("6 runs")
	}
	testenv.BusyCPUs(t)
	var answered, notSent int64
	const runs = 6
	for i := range runs {
		t.Run(fmt.Sprint("run ", i+1), func(t *testing.T) {
			a, n := odataKeepAliveShutdown(t)
			answered += a
			notSent += n
		})
	}
	t.Logf("%d runs under CPU load: %d answered, %d not sent, 0 lost", runs, answered, notSent)
}

// odataKeepAliveShutdown runs 8 keep-alive clients against `sluice odata`,
// ends its context (SIGTERM's path) while they run, and fails if a request
// written was not answered. A GET is one net/http's client sends again
// when a reused connection closes under it; that retry is counted as the
// loss it stands for.
func odataKeepAliveShutdown(t *testing.T) (int64, int64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, c, done := runODataForTest(ctx, t, "-demo-rows", "50",
		"-requests-per-second", "0", "-sequential=false", "-access-log=false", "-odata-shutdown-timeout", "30s")
	url := "http://" + s.ln.Addr().String() + c.opts.Root + "/Locations?$top=1"

	const (
		clients    = 8
		maxPerLoop = 100000 // bound on each client's loop
	)
	var (
		answered, lost, notSent atomic.Int64
		lostErrs                sync.Map
		wg                      sync.WaitGroup
	)
	warm := make(chan struct{}, clients)
	deadline := time.Now().Add(60 * time.Second)
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
			refused := 0
			for i := 0; i < maxPerLoop && time.Now().Before(deadline); i++ {
				var wrote, retried atomic.Bool
				req, err := http.NewRequest(http.MethodGet, url, nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("x-api-key", s.demoKey)
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					GotConn: func(httptrace.GotConnInfo) {
						if wrote.Load() {
							retried.Store(true) // written once already: that one was lost
						}
					},
					WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
				}))
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if retried.Load() {
					lost.Add(1)
					lostErrs.Store(fmt.Sprintf("client %d: a written request was sent again (err %v)", cl, err), true)
				}
				if err == nil {
					answered.Add(1)
					if i == 10 {
						warm <- struct{}{}
					}
					continue
				}
				if wrote.Load() {
					if !retried.Load() {
						lost.Add(1)
						lostErrs.Store(fmt.Sprintf("client %d: %v", cl, err), true)
					}
					continue
				}
				notSent.Add(1)
				if refused++; refused >= 3 {
					return
				}
			}
		}()
	}
	for range clients {
		select {
		case <-warm:
		case <-time.After(60 * time.Second):
			t.Fatal("the clients did not get going")
		}
	}
	cancel() // SIGTERM
	wg.Wait()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return")
	}
	if n := lost.Load(); n > 0 {
		var msgs []string
		lostErrs.Range(func(k, _ any) bool { msgs = append(msgs, k.(string)); return len(msgs) < 10 })
		t.Fatalf("%d requests written and never answered (%d answered, %d not sent): %v", n, answered.Load(), notSent.Load(), msgs)
	}
	return answered.Load(), notSent.Load()
}
