package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// probeLog keeps when each probe was sent and how long it took, so that
// -profile can save them beside the goroutine dumps: a slow probe is
// matched with what the server did at the time.
type probeLog struct {
	mu   sync.Mutex
	sent []time.Time
	took []time.Duration
}

func (p *probeLog) add(sent time.Time, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = append(p.sent, sent)
	p.took = append(p.took, took)
}

// save writes, when o.profile is set, one line per answered probe to
// <profile>-<server>-probes.txt: when it was sent (the wall clock, and
// since the flood started) and how long it took. A failure to write is
// told on stderr: the flood's verdict does not depend on it.
func (p *probeLog) save(o options, start time.Time) {
	if o.profile == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	fmt.Fprintln(&b, "# sent (UTC)\tsince flood start\ttook")
	for i, at := range p.sent {
		fmt.Fprintf(&b, "%s\t%v\t%v\n", at.UTC().Format("15:04:05.000"), at.Sub(start).Round(time.Millisecond), p.took[i].Round(time.Millisecond))
	}
	if err := os.WriteFile(o.profile+"-"+o.server+"-probes.txt", []byte(b.String()), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "probes: %v\n", err)
	}
}
