// Package rlsserver runs the rate limit service (server.Server) in the
// test's own process, for tests that need a real one on loopback ports:
// one way to start it, wait until it serves, and stop it, instead of a
// copy in every test file; and Harness, the memory-backed service with
// its rule directory, log and clients that the tests of package server
// and package transport share. (testenv itself cannot import server: the
// packages server is built from use testenv in their own tests.)
package rlsserver

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/server"
)

// Server is a running server.Server.
type Server struct {
	*server.Server
	t      testing.TB
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// Start builds a server from o (a discarding logger when o has none), runs
// it, and returns once it serves; a server that stops or does not start
// within testenv.EventuallyBound fails the test. It is stopped when the
// test ends, or earlier by Stop.
func Start(t testing.TB, o server.Options) *Server {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv, err := server.NewServer(context.Background(), o)
	if err != nil {
		t.Fatalf("starting the rate limit service: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Server: srv, t: t, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() { s.done <- srv.Run(ctx, ready) }()
	t.Cleanup(s.Stop)
	select {
	case <-ready:
	case err := <-s.done:
		s.once.Do(cancel) // nothing left for Stop to wait for
		t.Fatalf("the rate limit service stopped while starting: %v", err)
	case <-time.After(testenv.EventuallyBound):
		t.Fatalf("the rate limit service did not start within %v", testenv.EventuallyBound)
	}
	return s
}

// Stop stops the server and waits for Run to return, failing the test if
// it returns an error or does not return within testenv.EventuallyBound.
// Later calls do nothing.
func (s *Server) Stop() {
	s.once.Do(func() {
		s.cancel()
		select {
		case err := <-s.done:
			if err != nil {
				s.t.Errorf("the rate limit service's Run: %v", err)
			}
		case <-time.After(testenv.EventuallyBound):
			s.t.Errorf("the rate limit service did not stop within %v", testenv.EventuallyBound)
		}
	})
}
