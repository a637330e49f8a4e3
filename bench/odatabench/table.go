package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// tablePass is one timed read of the whole table: rows, bytes and time.
type tablePass struct {
	rows, bytes int64
	took        time.Duration
}

func (p tablePass) rate() float64 { return float64(p.rows) / p.took.Seconds() }

// tablePath is one way of reading every observation: COPY of the table, or
// an API collection paged to the end with $top=10000.
type tablePath struct {
	name   string
	anchor int // index of the COPY path it is divided by; -1 for a COPY
	read   func() (tablePass, error)
	passes []tablePass
}

// tableRun reads the whole observations table through each path in turn,
// rounds times, and prints each path's median rows/s and its ratio to the
// median of its COPY anchor: `COPY observations TO STDOUT` for the JSON
// collections, `COPY observations TO STDOUT WITH CSV` for $format=csv. The
// paths take turns, so a drift of the machine moves them alike.
func tableRun(ctx context.Context, pg *pgx.Conn, client *http.Client, base, key string, total int64, rounds int) error {
	page := func(path string) func() (tablePass, error) {
		return func() (tablePass, error) { return pageToEnd(client, base+path, key, total) }
	}
	paths := []*tablePath{
		{name: "`COPY observations TO STDOUT`", anchor: -1, read: func() (tablePass, error) { return copyTable(ctx, pg, "") }},
		{name: "API `/Observations` (JSON)", anchor: 0, read: page("/Observations?$top=10000")},
		{name: "API `/Records` (JSON)", anchor: 0, read: page("/Records?$top=10000")},
		{name: "`COPY observations TO STDOUT WITH CSV`", anchor: -1, read: func() (tablePass, error) { return copyTable(ctx, pg, " WITH CSV") }},
		{name: "API `/Observations?$format=csv`", anchor: 3, read: page("/Observations?$top=10000&$format=csv")},
	}
	for r := 0; r < rounds; r++ {
		for _, p := range paths {
			pass, err := p.read()
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			p.passes = append(p.passes, pass)
		}
	}
	fmt.Printf("Whole table, %d observations, every path %d times in turn (medians; API paths follow @odata.nextLink with $top=10000, identity coding):\n\n", total, rounds)
	fmt.Println("| path | bytes per row | rows/s | ÷ COPY |")
	fmt.Println("|---|---:|---:|---:|")
	ratios := map[string]float64{}
	for _, p := range paths {
		ratio := "1.00"
		if p.anchor >= 0 {
			x := medianRate(p.passes) / medianRate(paths[p.anchor].passes)
			ratio = fmt.Sprintf("%.2f", x)
			ratios[p.name] = x
		}
		last := p.passes[len(p.passes)-1]
		fmt.Printf("| %s | %.0f | %.0f | %s |\n", p.name, float64(last.bytes)/float64(last.rows), medianRate(p.passes), ratio)
	}
	fmt.Printf("\n**API ÷ COPY: /Observations %.2f×, /Records %.2f×, CSV %.2f×** (goals 0.8×, 0.6×, 0.9×).\n\n",
		ratios[paths[1].name], ratios[paths[2].name], ratios[paths[4].name])
	return nil
}

func medianRate(ps []tablePass) float64 {
	r := make([]float64, len(ps))
	for i, p := range ps {
		r[i] = p.rate()
	}
	slices.Sort(r)
	return r[len(r)/2]
}

// copyTable copies the whole observations table out, as text or with the
// given options.
func copyTable(ctx context.Context, pg *pgx.Conn, with string) (tablePass, error) {
	cw := &countWriter{}
	start := time.Now()
	tag, err := pg.PgConn().CopyTo(ctx, cw, "COPY observations TO STDOUT"+with)
	if err != nil {
		return tablePass{}, err
	}
	return tablePass{rows: tag.RowsAffected(), bytes: cw.n, took: time.Since(start)}, nil
}

// pageToEnd follows the next links from u to the last page. Every
// collection paged here has one row per observation, so a complete pass
// reads total rows.
func pageToEnd(client *http.Client, u, key string, total int64) (tablePass, error) {
	var pass tablePass
	start := time.Now()
	for u != "" {
		next, n, err := fetch(client, u, key)
		if err != nil {
			return pass, err
		}
		pass.bytes += n
		u = next
	}
	pass.took = time.Since(start)
	pass.rows = total
	return pass, nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
