// Command odatabench measures the OData API on a loaded PostgreSQL store:
// rows/s and page times of 10,000-row pages of /Observations and /Records
// next to `COPY (the page's rows) TO STDOUT` in the same run; the whole
// observations table read through COPY (text and CSV) and through the API
// (/Observations, /Records and $format=csv paged to the end), in turn, with
// API ÷ COPY; and the page times of a sparse filter paged to the end. The
// store is opened as `sluice odata` opens it. Fill it first with
// `sluice generate -db <dsn> -rows N`. make bench runs it (bench/odata.go).
//
//	go run ./bench/odatabench -db postgres://... -pages 200 -sparse "CharacteristicName eq 'Titanium'"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/odata"
	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

func main() {
	dsn := flag.String("db", "", "loaded PostgreSQL store (postgres://...)")
	pages := flag.Int("pages", 200, "10,000-row pages per collection for the throughput run (0 skips it)")
	sparse := flag.String("sparse", "CharacteristicName eq 'Titanium'", "filter paged to the end for the sparse run (empty skips it)")
	sparseTop := flag.Int("sparse-top", 1000, "$top of the sparse run")
	passes := flag.Int("passes", 10, "times the sparse filter is paged to the end")
	tableRounds := flag.Int("table-rounds", 3, "times the whole table is read through COPY and through the API, in turn (0 skips it)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "odatabench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*dsn, *pages, *sparse, *sparseTop, *passes, *tableRounds); err != nil {
		fmt.Fprintln(os.Stderr, "odatabench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(dsn string, pages int, sparse string, sparseTop, passes, tableRounds int) error {
	if !sqlstore.IsPostgres(dsn) {
		return errors.New("-db must be a PostgreSQL DSN")
	}
	ctx := context.Background()
	// The store as `sluice odata` opens it: with its statement timeouts,
	// whose session settings cost round trips of their own.
	opts := odata.DefaultOptions()
	opts.Sequential = false
	db, err := sqlstore.OpenWith(ctx, dsn, sqlstore.Config{StatementTimeout: opts.QueryTimeout, StreamTimeout: opts.StreamTimeout})
	if err != nil {
		return err
	}
	defer db.Close()
	// COPY goes through a connection of its own: the store's pool is the
	// API's, and bulk copy is no part of the product.
	pg, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer pg.Close(ctx)
	key, _, err := db.AddKey(ctx, "odatabench")
	if err != nil {
		return err
	}
	defer db.RevokeKey(ctx, "odatabench")
	base, stop, err := serve(opts, db)
	if err != nil {
		return err
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	// The same server with metrics on, over the same store: its pages,
	// interleaved with the plain server's, say what the metrics cost.
	opts.Metrics = odata.NewMetrics()
	baseM, stopM, err := serve(opts, db)
	if err != nil {
		return err
	}
	defer stopM()

	total, err := countAll(ctx, db)
	if err != nil {
		return err
	}
	fmt.Printf("store: %d observations\n\n", total)
	if pages > 0 {
		fmt.Println("| collection | path | pages | rows | rows/s | median page | p99 page |")
		fmt.Println("|---|---|---:|---:|---:|---:|---:|")
		for _, coll := range []*query.Collection{query.Observations, query.Records} {
			if err := throughput(ctx, db, pg, client, base, key, coll, pages); err != nil {
				return err
			}
		}
		fmt.Println()
		if err := metricsAB(client, base, baseM, key, pages); err != nil {
			return err
		}
	}
	if tableRounds > 0 {
		if err := tableRun(ctx, pg, client, base, key, total, tableRounds); err != nil {
			return err
		}
	}
	if sparse != "" {
		if err := sparseRun(ctx, db, client, base, key, sparse, sparseTop, passes); err != nil {
			return err
		}
	}
	return nil
}

// serve starts an OData server on a loopback port and returns its root URL.
func serve(opts odata.Options, db *sqlstore.DB) (base string, stop func(), err error) {
	srv, err := odata.NewServer(opts, db, db, nil)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String() + opts.Root, func() { srv.Shutdown(context.Background()) }, nil
}

func countAll(ctx context.Context, db *sqlstore.DB) (int64, error) {
	q, err := query.Parse(query.Observations, []query.Param{{Name: "$count", Value: "true"}})
	if err != nil {
		return 0, err
	}
	return db.Count(ctx, q)
}

// fetch GETs a page, reads the whole body and returns its next link.
func fetch(client *http.Client, u, key string) (next string, bytes int64, err error) {
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("x-api-key", key)
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return "", n, err
	}
	if resp.StatusCode != 200 {
		return "", n, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	link := resp.Header.Get("Link")
	if link == "" {
		return "", n, nil
	}
	return strings.TrimSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`), n, nil
}

// throughput pages a collection through the API and, for each page, copies
// the same id range out with COPY right after it.
func throughput(ctx context.Context, db *sqlstore.DB, pg *pgx.Conn, client *http.Client, base, key string, coll *query.Collection, pages int) error {
	const top = 10000
	var api, cp []time.Duration
	var apiRows, cpRows, apiBytes int64
	u := fmt.Sprintf("%s/%s?$top=%d", base, coll.Name, top)
	q, err := query.Parse(coll, []query.Param{{Name: "$top", Value: fmt.Sprint(top)}})
	if err != nil {
		return err
	}
	for i := 0; i < pages && u != ""; i++ {
		// The same page as the store decides it, for COPY.
		p, err := db.Probe(ctx, q)
		if err != nil {
			return err
		}
		start := time.Now()
		next, n, err := fetch(client, u, key)
		if err != nil {
			return err
		}
		api = append(api, time.Since(start))
		apiRows += int64(p.Rows)
		apiBytes += n

		start = time.Now()
		rows, err := copyPage(ctx, pg, coll, p)
		if err != nil {
			return err
		}
		cp = append(cp, time.Since(start))
		cpRows += rows
		u = next
		q.After = p.Last
	}
	row := func(path string, d []time.Duration, rows int64) {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		fmt.Printf("| %s | %s | %d | %d | %.0f | %s | %s |\n", coll.Name, path, len(d), rows,
			float64(rows)/sum.Seconds(), pct(d, 0.50), pct(d, 0.99))
	}
	row("API (HTTP, JSON, identity)", api, apiRows)
	row("COPY (same rows) TO STDOUT", cp, cpRows)
	fmt.Fprintf(os.Stderr, "%s: %.0f bytes of JSON per row\n", coll.Name, float64(apiBytes)/float64(apiRows))
	return nil
}

// metricsAB pages /Observations on the server without metrics and on the
// one with them, a page of each in turn, and prints the rows/s of both and
// their ratio.
func metricsAB(client *http.Client, off, on, key string, pages int) error {
	var took [2]time.Duration
	var bytes [2]int64
	next := [2]string{off + "/Observations?$top=10000", on + "/Observations?$top=10000"}
	for i := 0; i < pages && next[0] != "" && next[1] != ""; i++ {
		for side := range next {
			start := time.Now()
			u, n, err := fetch(client, next[side], key)
			if err != nil {
				return err
			}
			took[side] += time.Since(start)
			bytes[side] += n
			next[side] = u
		}
	}
	off0, on1 := float64(bytes[0])/took[0].Seconds(), float64(bytes[1])/took[1].Seconds()
	fmt.Printf("Metrics cost, /Observations pages, interleaved (same pages, same store): metrics off %.1f MB/s, on %.1f MB/s: **on ÷ off %.2f×**.\n\n",
		off0/1e6, on1/1e6, on1/off0)
	return nil
}

func sparseRun(ctx context.Context, db *sqlstore.DB, client *http.Client, base, key, filter string, top, passes int) error {
	f, err := query.ParseFilter(query.Observations, filter)
	if err != nil {
		return err
	}
	q, err := query.Parse(query.Observations, []query.Param{{Name: "$count", Value: "true"}, {Name: "$filter", Value: filter}})
	if err != nil {
		return err
	}
	n, err := db.Count(ctx, q)
	if err != nil {
		return err
	}
	var times []time.Duration
	var pages int
	for pass := 0; pass < passes; pass++ {
		u := fmt.Sprintf("%s/Observations?$top=%d&$filter=%s", base, top, url.QueryEscape(query.String(f)))
		for u != "" {
			start := time.Now()
			next, _, err := fetch(client, u, key)
			if err != nil {
				return err
			}
			times = append(times, time.Since(start))
			pages++
			u = next
		}
	}
	fmt.Printf("sparse filter `%s`: %d matching rows, $top=%d, paged to the end %d times (%d pages)\n\n", filter, n, top, passes, pages)
	fmt.Println("| pages | median page | p99 page | max page |")
	fmt.Println("|---:|---:|---:|---:|")
	fmt.Printf("| %d | %s | %s | %s |\n", len(times), pct(times, 0.50), pct(times, 0.99), pct(times, 1))
	return nil
}

// copyPage runs `COPY (...) TO STDOUT` of the rows of page p, every column
// of the tables the collection reads, joined as the API joins them: the
// database's own fastest way out of the same rows. The statement is the
// benchmark's, not the store's: only ids from the store's own probe are put
// into it, as numbers.
func copyPage(ctx context.Context, pg *pgx.Conn, coll *query.Collection, p query.Page) (int64, error) {
	from := "observations o"
	cols := "o.*"
	switch coll {
	case query.Observations:
	case query.Records:
		from += " JOIN locations l ON l.id = o.location_id JOIN datasets d ON d.doi = o.doi"
		cols += ", l.*, d.*"
	default:
		return 0, fmt.Errorf("no COPY statement for %s", coll.Name)
	}
	sql := fmt.Sprintf("COPY (SELECT %s FROM %s WHERE o.id >= %d AND o.id <= %d ORDER BY o.id) TO STDOUT",
		cols, from, p.First.Int, p.Last.Int)
	tag, err := pg.PgConn().CopyTo(ctx, io.Discard, sql)
	if err != nil {
		return 0, fmt.Errorf("copy: %w", err)
	}
	return tag.RowsAffected(), nil
}

// pct is the nearest-rank percentile (testenv.Percentile) of unsorted d.
func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return testenv.Percentile(s, p).Round(10 * time.Microsecond)
}
