package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/internal/harness"
	"github.com/sluicehq/sluice/loadtest/internal/odataserver"
)

// The limit the scenario sets: a token bucket of rps per second holding
// burst.
const rps, burst = 2, 4

func main() {
	harness.LogAs("odata-rls-down")
	bin := flag.String("sluice", "bin/sluice", "the sluice binary")
	duration := flag.Duration("duration", 5*time.Second, "how long one key hammers")
	flag.Parse()
	if *duration < time.Second {
		log.Fatal("-duration must be at least 1s")
	}
	harness.Verdict(run(*bin, *duration))
}

func run(bin string, duration time.Duration) ([]string, error) {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return nil, err
	}
	dead := fmt.Sprintf("127.0.0.1:%d", ports[0])
	log.Printf("server: sluice odata -rate-limit-service %s (nothing listens there) -requests-per-second %d -burst %d", dead, rps, burst)
	srv, err := odataserver.Start(bin, 2000, 1, rps, "-rate-limit-service", dead, "-burst", fmt.Sprint(burst))
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	c := &http.Client{Timeout: 30 * time.Second}
	statuses := map[int]int{}
	var broken []string
	start := time.Now()
	for n := 0; time.Since(start) < duration && n < 1_000_000; n++ {
		req, err := http.NewRequest(http.MethodGet, srv.Root+"/Locations?$top=1", nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("x-api-key", srv.Keys[0])
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			broken = append(broken, "a 429 without Retry-After")
		}
	}
	took := time.Since(start)
	total := 0
	for _, n := range statuses {
		total += n
	}
	log.Printf("%d requests in %s (%.0f/s): statuses %v", total, took.Round(time.Millisecond), float64(total)/took.Seconds(), statuses)
	allowed := burst + rps*int(math.Ceil(took.Seconds()))
	if statuses[200] > allowed {
		broken = append(broken, fmt.Sprintf("%d requests served in %s, the limit allows %d: the limit is off", statuses[200], took.Round(time.Millisecond), allowed))
	}
	if statuses[200] == 0 {
		broken = append(broken, "no request was served")
	}
	if statuses[429] == 0 {
		broken = append(broken, "no request was refused with 429")
	}
	for s := range statuses {
		if s != 200 && s != 429 {
			broken = append(broken, fmt.Sprintf("%d answers with status %d", statuses[s], s))
		}
	}
	b, err := os.ReadFile(srv.Log)
	if err != nil {
		return nil, err
	}
	warns := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "rate limit service") {
			warns++
		}
	}
	log.Printf("server log: %d WARN line(s) about the rate limit service", warns)
	if warns != 1 {
		broken = append(broken, fmt.Sprintf("%d WARN lines about the failing service, want exactly 1", warns))
	}
	return broken, nil
}
