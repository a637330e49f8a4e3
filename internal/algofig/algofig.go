package algofig

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/memory"
)

// Scenario: a limit of 10 requests per second; one caller sends 100
// requests/s from 0.8 s to 1.2 s, across the window edge at 1 s.
const (
	limit    = 10
	from     = 800 * time.Millisecond
	to       = 1200 * time.Millisecond
	every    = 10 * time.Millisecond
	viewFrom = 500 * time.Millisecond
	viewTo   = 1700 * time.Millisecond
)

// Series is one algorithm's admitted requests.
type Series struct {
	Name     string
	Rule     string
	Admitted []time.Duration // since the start of the window before the edge
}

type counter struct{ b engine.Backend }

func (c counter) Apply(ctx context.Context, ops []engine.CounterOp, batch engine.Batch) error {
	return engine.DirectCounter{Backend: c.b}.Apply(ctx, ops, batch)
}

// Run simulates the scenario for each algorithm.
func Run() ([]Series, error) {
	rules := []struct{ name, rule string }{
		{"fixed_window", "{unit: second, requests_per_unit: 10}"},
		{"sliding_window", "{unit: second, requests_per_unit: 10, algorithm: sliding_window}"},
		{"token_bucket", "{unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 10}"},
	}
	start := time.Unix(1_800_000_000, 0) // a whole second: a window starts here
	var out []Series
	for _, r := range rules {
		now := start
		clock := func() time.Time { return now }
		o := engine.DefaultOptions()
		o.Counter = counter{memory.New(clock)}
		o.Clock = clock
		o.ExpirationJitterMax = 0
		svc, err := engine.NewService(o)
		if err != nil {
			return nil, err
		}
		yaml := "domain: fig\ndescriptors:\n  - key: k\n    rate_limit: " + r.rule + "\n"
		cfg, err := svc.LoadConfig([]engine.ConfigFile{{Name: r.name, YAML: []byte(yaml)}}, false)
		if err != nil {
			return nil, err
		}
		svc.SetConfig(cfg)
		s := Series{Name: r.name, Rule: r.rule}
		for at := from; at <= to; at += every {
			now = start.Add(at)
			resp, err := svc.ShouldRateLimit(context.Background(), &engine.Request{Domain: "fig",
				Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "k", Value: "v"}}}}})
			if err != nil {
				return nil, err
			}
			if resp.OverallCode == engine.CodeOK {
				s.Admitted = append(s.Admitted, at)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// SVG draws the cumulative admitted requests over time.
func SVG(series []Series) []byte {
	const (
		w, h               = 680, 340
		left, right        = 60, 200
		top, bottom        = 30, 50
		yMax               = 25
		plotW, plotH       = w - left - right, h - top - bottom
		sent, sentCol      = "sent (100/s)", "#bbbbbb"
		edgeLabel, axisCol = "window edge", "#444444"
	)
	colors := []string{"#d62728", "#1f77b4", "#2ca02c"}
	x := func(d time.Duration) float64 {
		return left + float64(d-viewFrom)/float64(viewTo-viewFrom)*plotW
	}
	y := func(n int) float64 { return top + plotH - float64(n)/yMax*plotH }
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13">Requests admitted (cumulative), limit 10/s; one caller sends 100/s from 0.8 s to 1.2 s</text>`+"\n", left)
	// Axes and ticks.
	fmt.Fprintf(&b, `<path d="M%d %d V%d H%d" fill="none" stroke="%s"/>`+"\n", left, top, top+plotH, left+plotW, axisCol)
	for d := viewFrom; d <= viewTo; d += 100 * time.Millisecond {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x(d), top+plotH, x(d), top+plotH+4, axisCol)
		if d%(200*time.Millisecond) == 100*time.Millisecond {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.1f s</text>`+"\n", x(d), top+plotH+18, d.Seconds())
		}
	}
	for n := 0; n <= yMax; n += 5 {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eeeeee"/>`+"\n", left, y(n), left+plotW, y(n))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n", left-6, y(n)+4, n)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">time</text>`+"\n", left+plotW/2, h-10)
	// The window edge.
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="4 3"/>`+"\n", x(time.Second), top, x(time.Second), top+plotH, axisCol)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="%s">%s</text>`+"\n", x(time.Second)+4, top+12, axisCol, edgeLabel)
	// What was sent, then each algorithm.
	var sentTimes []time.Duration
	for at := from; at <= to; at += every {
		sentTimes = append(sentTimes, at)
	}
	steps := func(ts []time.Duration, col string, width float64, dash string) {
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="`, col, width, dash)
		n := 0
		fmt.Fprintf(&b, "%.1f,%.1f", x(viewFrom), y(0))
		for _, t := range ts {
			if n+1 > yMax {
				break
			}
			fmt.Fprintf(&b, " %.1f,%.1f %.1f,%.1f", x(t), y(n), x(t), y(n+1))
			n++
		}
		fmt.Fprintf(&b, " %.1f,%.1f\"/>\n", x(viewTo), y(n))
	}
	steps(sentTimes, sentCol, 1.5, ` stroke-dasharray="3 2"`)
	for i, s := range series {
		steps(s.Admitted, colors[i%len(colors)], 2.5, "")
	}
	// Legend.
	ly := top + 10
	legend := func(col, label string) {
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"/>`+"\n", left+plotW+15, ly, left+plotW+40, ly, col)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left+plotW+46, ly+4, label)
		ly += 22
	}
	for i, s := range series {
		legend(colors[i%len(colors)], fmt.Sprintf("%s: %d", s.Name, len(s.Admitted)))
	}
	legend(sentCol, fmt.Sprintf("%s: %d", sent, len(sentTimes)))
	b.WriteString("</svg>\n")
	return b.Bytes()
}
