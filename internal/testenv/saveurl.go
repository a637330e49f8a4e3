package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
)

// SaveURL writes what a GET of url answers to path: a debug endpoint's
// CPU profile or goroutine dump, saved by bench and the load tests while
// they drive a server. Anything but 200 OK is an error naming url.
func SaveURL(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	return os.WriteFile(path, b, 0o644)
}
