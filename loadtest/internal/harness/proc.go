package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

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
