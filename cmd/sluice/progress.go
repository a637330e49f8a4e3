package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progressBar draws `label [=====>    ]  45%  4.5M/10.0M rows  210k rows/s  ETA 25s`
// on a terminal, redrawn at most five times a second; elsewhere it prints a
// line every ten seconds.
type progressBar struct {
	w           io.Writer
	label       string
	unit        string
	tty         bool
	start       time.Time
	last        time.Time
	done, total int64
	drawn       bool
}

func newProgressBar(w *os.File, label, unit string) *progressBar {
	fi, err := w.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0
	return &progressBar{w: w, label: label, unit: unit, tty: tty, start: time.Now()}
}

func (p *progressBar) update(done, total int64) {
	p.done, p.total = done, total
	every := 200 * time.Millisecond
	if !p.tty {
		every = 10 * time.Second
	}
	if now := time.Now(); now.Sub(p.last) >= every {
		p.last = now
		p.draw()
	}
}

func (p *progressBar) draw() {
	if p.total <= 0 {
		return
	}
	frac := float64(p.done) / float64(p.total)
	frac = min(max(frac, 0), 1)
	const width = 30
	filled := int(frac * width)
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	elapsed := time.Since(p.start).Seconds()
	rate := float64(p.done) / max(elapsed, 1e-9)
	eta := "-"
	if rate > 0 && p.done < p.total {
		eta = (time.Duration(float64(p.total-p.done)/rate) * time.Second).Round(time.Second).String()
	}
	line := fmt.Sprintf("%s [%s] %3.0f%%  %s/%s %s  %s %s/s  ETA %s", p.label, bar, frac*100,
		human(float64(p.done)), human(float64(p.total)), p.unit, human(rate), p.unit, eta)
	if p.tty {
		fmt.Fprintf(p.w, "\r%-100s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.drawn = true
}

// finish draws the final state and ends the line.
func (p *progressBar) finish() {
	if p.total > 0 {
		p.draw()
	}
	if p.drawn && p.tty {
		fmt.Fprintln(p.w)
	}
}

func human(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
