package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// odataSizes are the data set and run lengths of the OData section.
type odataSizes struct {
	rows, pages, passes, clientPages int
}

// benchOData fills a real PostgreSQL with generated data, runs odatabench
// (10,000-row pages through the API against COPY of the same query, and a
// sparse filter paged to the end), and measures the server's peak RSS while
// four clients page through /Records with $top=10000. It returns markdown.
func benchOData(ctx context.Context, tb *testenv.ProgramTB, bin, work string, sz odataSizes) (string, error) {
	pg := testenv.StartPostgres(tb)
	if err := tb.Err(); err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	dsn := pg.CreateDatabase(tb, "odatabench")
	if err := tb.Err(); err != nil {
		return "", err
	}
	var out strings.Builder
	fmt.Fprintf(&out, "### OData (PostgreSQL, %d observations)\n\n", sz.rows)

	log.Printf("odata: generating %d rows into PostgreSQL", sz.rows)
	start := time.Now()
	if b, err := exec.CommandContext(ctx, bin, "generate", "-db", dsn, "-rows", fmt.Sprint(sz.rows)).CombinedOutput(); err != nil {
		return "", fmt.Errorf("sluice generate: %v\n%s", err, tail(string(b), 10))
	}
	fmt.Fprintf(&out, "Generated in %s.\n\n", time.Since(start).Round(100*time.Millisecond))

	log.Printf("odata: pages vs COPY, sparse filter")
	obench := filepath.Join(work, "odatabench")
	if b, err := exec.CommandContext(ctx, "go", "build", "-o", obench, "./odata/cmd/odatabench").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building odatabench: %v\n%s", err, b)
	}
	b, err := exec.CommandContext(ctx, obench, "-db", dsn, "-pages", fmt.Sprint(sz.pages), "-passes", fmt.Sprint(sz.passes)).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("odatabench: %v\n%s", err, tail(string(b), 10))
	}
	out.Write(b)
	out.WriteString("\n")

	log.Printf("odata: peak RSS with 4 clients paging /Records $top=10000")
	idle, peak, rows, err := odataRSS(ctx, bin, work, dsn, sz.clientPages)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&out, "Server RSS while 4 clients page /Records with `$top=10000` (%d rows read): idle %.1f MiB, peak %.1f MiB (%.2f× idle).\n\n",
		rows, float64(idle)/(1<<20), float64(peak)/(1<<20), float64(peak)/float64(max(idle, 1)))
	return out.String(), nil
}

// odataRSS runs `sluice odata` on the store and samples its RSS while four
// clients (four keys, so per-key limits do not interfere) each follow
// @odata.nextLink for up to pages pages.
func odataRSS(ctx context.Context, bin, work, dsn string, pages int) (idle, peak int64, rows int64, err error) {
	keys := make([]string, 4)
	for i := range keys {
		b, err := exec.CommandContext(ctx, bin, "keys", "add", "-db", dsn, fmt.Sprintf("bench%d", i)).CombinedOutput()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("sluice keys add: %v\n%s", err, b)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		keys[i] = strings.TrimSpace(lines[len(lines)-1])
	}
	port, err := freePort()
	if err != nil {
		return 0, 0, 0, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startProcess("sluice-odata", []string{bin, "odata", "-db", dsn, "-odata-addr", addr, "-requests-per-second", "0"}, nil, addr, work)
	if err != nil {
		return 0, 0, 0, err
	}
	defer p.stop()
	time.Sleep(300 * time.Millisecond)
	idle, _ = rssBytes(p.pid())
	peak = idle

	var done atomic.Bool
	var samplerWG sync.WaitGroup
	samplerWG.Add(1)
	go func() {
		defer samplerWG.Done()
		for !done.Load() {
			if r, err := rssBytes(p.pid()); err == nil && r > atomic.LoadInt64(&peak) {
				atomic.StoreInt64(&peak, r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	var total atomic.Int64
	errc := make(chan error, len(keys))
	client := &http.Client{Timeout: 60 * time.Second}
	for _, key := range keys {
		wg.Add(1)
		go func(key string) {
			defer wg.Done()
			next := "http://" + addr + "/v1/odata/v4/Records?$top=10000"
			for i := 0; i < pages && next != "" && ctx.Err() == nil; i++ {
				n, link, err := fetchPage(client, next, key)
				if err != nil {
					errc <- err
					return
				}
				total.Add(int64(n))
				next = link
			}
		}(key)
	}
	wg.Wait()
	done.Store(true)
	samplerWG.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return 0, 0, 0, err
	}
	return idle, atomic.LoadInt64(&peak), total.Load(), nil
}

// fetchPage reads one page, counting rows without keeping them.
func fetchPage(c *http.Client, url, key string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("x-api-key", key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, "", fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, bytes.TrimSpace(b))
	}
	dec := json.NewDecoder(bufio.NewReaderSize(resp.Body, 64<<10))
	var page struct {
		Value []json.RawMessage `json:"value"`
		Next  string            `json:"@odata.nextLink"`
	}
	if err := dec.Decode(&page); err != nil {
		return 0, "", fmt.Errorf("decoding %s: %w", url, err)
	}
	return len(page.Value), page.Next, nil
}
