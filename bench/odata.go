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
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	brotli "github.com/molecule-man/go-brrr"

	"github.com/sluicehq/sluice/internal/testenv"
)

// odataSizes are the data set and run lengths of the OData section.
type odataSizes struct {
	rows, pages, passes, clientPages, codingRuns int
}

// benchOData fills a real PostgreSQL with generated data, runs bench/odatabench
// (10,000-row pages through the API against COPY of the same rows, and a
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
	if err := testenv.SluiceGenerate(ctx, bin, dsn, sz.rows); err != nil {
		return "", err
	}
	fmt.Fprintf(&out, "Generated in %s.\n\n", time.Since(start).Round(100*time.Millisecond))

	log.Printf("odata: pages vs COPY, sparse filter")
	obench := filepath.Join(work, "odatabench")
	if b, err := exec.CommandContext(ctx, "go", "build", "-o", obench, "./bench/odatabench").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building odatabench: %v\n%s", err, b)
	}
	b, err := exec.CommandContext(ctx, obench, "-db", dsn, "-pages", fmt.Sprint(sz.pages), "-passes", fmt.Sprint(sz.passes)).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("odatabench: %v\n%s", err, testenv.TailLines(string(b), 10))
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

	log.Printf("odata: content codings of a 10,000-row page")
	codings, err := odataCodings(ctx, bin, work, dsn, sz.codingRuns)
	if err != nil {
		return "", err
	}
	out.WriteString(codings)
	return out.String(), nil
}

// odataRSS runs `sluice odata` on the store and samples its RSS while four
// clients (four keys, so per-key limits do not interfere) each follow
// @odata.nextLink for up to pages pages.
func odataRSS(ctx context.Context, bin, work, dsn string, pages int) (idle, peak int64, rows int64, err error) {
	keys := make([]string, 4)
	for i := range keys {
		if keys[i], err = testenv.SluiceAddKey(ctx, bin, dsn, fmt.Sprintf("bench%d", i)); err != nil {
			return 0, 0, 0, err
		}
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
	idle, _ = testenv.RSS(p.pid())
	peak = idle

	var done atomic.Bool
	var samplerWG sync.WaitGroup
	samplerWG.Add(1)
	go func() {
		defer samplerWG.Done()
		for !done.Load() {
			if r, err := testenv.RSS(p.pid()); err == nil && r > atomic.LoadInt64(&peak) {
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

// get GETs url with the API key, asking for coding ("" leaves the client's
// default); anything but 200 is an error that quotes the body's start.
func get(c *http.Client, url, key, coding string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", key)
	if coding != "" {
		req.Header.Set("Accept-Encoding", coding)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp, nil
}

// fetchPage reads one page, counting rows without keeping them.
func fetchPage(c *http.Client, url, key string) (int, string, error) {
	resp, err := get(c, url, key, "")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
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

// odataCodings measures one 10,000-row /Observations page per content
// coding: bytes on the wire, client time to the last byte (median of the
// runs) and the sluice process's CPU per page (user+system from /proc,
// divided by the pages). The pages are identical, so the CPU difference
// between a coding and identity is the cost of compressing.
func odataCodings(ctx context.Context, bin, work, dsn string, runs int) (string, error) {
	key, err := testenv.SluiceAddKey(ctx, bin, dsn, "bench-codings")
	if err != nil {
		return "", err
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p, err := startProcess("sluice-odata-codings", []string{bin, "odata", "-db", dsn, "-odata-addr", addr,
		"-requests-per-second", "0", "-access-log=false", "-brotli"}, nil, addr, work)
	if err != nil {
		return "", err
	}
	defer p.stop()
	url := "http://" + addr + "/v1/odata/v4/Observations?$top=10000"
	// The client must not decode: the bytes counted are the wire bytes.
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	var out strings.Builder
	out.WriteString("Content codings, one 10,000-row `/Observations` page (" + fmt.Sprint(runs) + " runs each; CPU is the sluice process's user+system time per page):\n\n")
	out.WriteString("| coding | bytes per page | ratio | median time per page | server CPU per page |\n|---|---:|---:|---:|---:|\n")
	var identity int64
	var page []byte
	for _, coding := range []string{"identity", "gzip", "br", "zstd"} {
		if _, _, err := getCoded(client, url, key, coding); err != nil { // warm the cache and the pools
			return "", err
		}
		before, err := testenv.CPUSeconds(p.pid())
		if err != nil {
			return "", err
		}
		var times []time.Duration
		var size int64
		for i := 0; i < runs && ctx.Err() == nil; i++ {
			st := time.Now()
			n, got, err := getCoded(client, url, key, coding)
			if err != nil {
				return "", err
			}
			want := coding
			if coding == "identity" {
				want = ""
			}
			if got != want {
				return "", fmt.Errorf("asked for %s, got Content-Encoding %q", coding, got)
			}
			times = append(times, time.Since(st))
			size = n
		}
		after, err := testenv.CPUSeconds(p.pid())
		if err != nil {
			return "", err
		}
		if coding == "identity" {
			identity = size
			if page, err = getBody(client, url, key); err != nil {
				return "", err
			}
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		fmt.Fprintf(&out, "| %s | %d | %.3f | %.1f ms | %.1f ms |\n", coding, size, float64(size)/float64(max(identity, 1)),
			float64(times[len(times)/2].Microseconds())/1000, (after-before)*1000/float64(len(times)))
	}
	out.WriteString("\n")
	out.WriteString(encoderTable(page, runs))
	return out.String(), nil
}

// encoderTable compresses the identity page in this process, one goroutine,
// with the server's encoder settings and, for reference, gzip's default
// level: the encoder's own cost, apart from the database and the socket.
func encoderTable(page []byte, runs int) string {
	var out strings.Builder
	out.WriteString("The same page compressed in one goroutine (median of " + fmt.Sprint(runs) + "; the server's settings, and gzip's default level for reference):\n\n")
	out.WriteString("| encoder | bytes | time |\n|---|---:|---:|\n")
	for _, enc := range []struct {
		name string
		mk   func(io.Writer) io.WriteCloser
	}{
		{"gzip level 6 (gzip's default)", func(w io.Writer) io.WriteCloser { z, _ := gzip.NewWriterLevel(w, 6); return z }},
		{"gzip level 1 (served)", func(w io.Writer) io.WriteCloser { z, _ := gzip.NewWriterLevel(w, 1); return z }},
		{"brotli level 3, 1 MiB window (served)", func(w io.Writer) io.WriteCloser {
			z, _ := brotli.NewWriterOptions(w, 3, brotli.WriterOptions{LGWin: 20})
			return z
		}},
		{"zstd fastest, 1 MiB window (served)", func(w io.Writer) io.WriteCloser {
			z, _ := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
				zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
			return z
		}},
	} {
		var times []time.Duration
		var size int
		for i := 0; i < runs; i++ {
			var b bytes.Buffer
			st := time.Now()
			w := enc.mk(&b)
			for off := 0; off < len(page); off += 32 << 10 {
				_, _ = w.Write(page[off:min(off+32<<10, len(page))])
			}
			_ = w.Close()
			times = append(times, time.Since(st))
			size = b.Len()
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		fmt.Fprintf(&out, "| %s | %d | %.1f ms |\n", enc.name, size, float64(times[len(times)/2].Microseconds())/1000)
	}
	return out.String() + "\n"
}

// getBody reads a page uncompressed.
func getBody(c *http.Client, url, key string) ([]byte, error) {
	resp, err := get(c, url, key, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// getCoded reads a page asking for one coding and returns the body's wire
// size and the Content-Encoding answered.
func getCoded(c *http.Client, url, key, coding string) (int64, string, error) {
	accept := coding
	if coding == "br" {
		// br offered alone is never answered (clients send it without
		// decoding it); a stack that decodes it offers another coding too.
		accept = "br, gzip;q=0.001"
	}
	resp, err := get(c, url, key, accept)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	return n, resp.Header.Get("Content-Encoding"), err
}
