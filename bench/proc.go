package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// mallocs reads memstats.Mallocs from a sluice debug port's /stats (expvar).
func mallocs(debugAddr string) (uint64, error) {
	ms, err := memStats(debugAddr)
	return ms.Mallocs, err
}

// serverMem is the part of a debug port's memstats the bench reads.
type serverMem struct{ Mallocs, HeapInuse uint64 }

// memStats reads the memstats line of a sluice debug port's /stats.
func memStats(debugAddr string) (serverMem, error) {
	var ms serverMem
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + debugAddr + "/stats")
	if err != nil {
		return ms, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "memstats: "); ok {
			err := json.Unmarshal([]byte(rest), &ms)
			return ms, err
		}
	}
	return ms, fmt.Errorf("no memstats at %s/stats", debugAddr)
}

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	n := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n = strings.Count(string(b), "processor\t:")
	}
	return fmt.Sprintf("%d × %s", n, model)
}
