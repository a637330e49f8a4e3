package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// runHealthcheck exists because minimal images have no curl: the image's
// HEALTHCHECK runs the binary itself. Without -url it asks the service in the
// same container, on the port the same environment gives it (PORT, HOST).
func runHealthcheck(args []string) error {
	fs := newFlagSet("healthcheck", "healthcheck [-url URL] [-timeout D]", []envVar{{"HOST, PORT", "0.0.0.0, 8080", "the service whose /healthcheck is asked without -url"}})
	url := fs.String("url", defaultHealthURL(os.LookupEnv), "health endpoint to ask")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	return checkHealth(*url, *timeout)
}

// defaultHealthURL is the service's own /healthcheck: PORT (default 8080) on
// HOST, or on loopback when HOST listens on every address.
func defaultHealthURL(lookup func(string) (string, bool)) string {
	host, _ := lookup("HOST")
	switch host {
	case "", "0.0.0.0", "::", "[::]":
		host = "127.0.0.1"
	}
	port, ok := lookup("PORT")
	if !ok || port == "" {
		port = "8080"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthcheck"
}

func checkHealth(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health URL %q: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("unhealthy: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("unhealthy: %s answered %d %q", url, resp.StatusCode, body)
	}
	return nil
}
