package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// RSS is a process's resident set size in bytes, from /proc/<pid>/status.
func RSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("harness: %w", err)
	}
	defer f.Close()
	return ParseVmRSS(f)
}

// ParseVmRSS reads the VmRSS line of a /proc/<pid>/status file ("VmRSS:
// 12345 kB") and returns bytes.
func ParseVmRSS(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if strings.TrimSpace(unit) != "kB" {
			return 0, fmt.Errorf("harness: VmRSS unit %q, want kB", unit)
		}
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || kb < 0 || kb > 1<<40 {
			return 0, fmt.Errorf("harness: VmRSS value %q", num)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("harness: reading status: %w", err)
	}
	return 0, errors.New("harness: no VmRSS line (a kernel thread, or the process is gone)")
}

// Goroutines asks a Go server's debug port for its goroutine count
// (/debug/pprof/goroutine?debug=1, whose first line is "goroutine profile:
// total N").
func Goroutines(ctx context.Context, debugAddr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+debugAddr+"/debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		return 0, fmt.Errorf("harness: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("harness: goroutine profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("harness: goroutine profile: HTTP %d", resp.StatusCode)
	}
	line, err := bufio.NewReader(io.LimitReader(resp.Body, 4096)).ReadString('\n')
	if err != nil && line == "" {
		return 0, fmt.Errorf("harness: goroutine profile: %w", err)
	}
	return ParseGoroutineTotal(line)
}

// ParseGoroutineTotal reads "goroutine profile: total N".
func ParseGoroutineTotal(line string) (int, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "goroutine profile: total ")
	if !ok {
		return 0, fmt.Errorf("harness: not a goroutine profile header: %q", truncate(line, 80))
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("harness: goroutine total %q", truncate(rest, 40))
	}
	return n, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
