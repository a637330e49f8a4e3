package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProcessLifecycle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	open := ln.Addr().String()
	tests := []struct {
		name     string
		script   string
		check    func(context.Context) error
		ready    bool // WaitReady succeeds
		exited   bool // WaitReady fails with ErrExited
		stopOK   bool // Stop reports a clean exit
		logLines int  // lines holding MARK2
	}{
		// Ready once the trap is set: the marker lines follow it.
		{"ready, exits 0 on SIGTERM", `trap 'exit 0' TERM; echo MARK$((1+1)); echo MARK$((1+1)); while :; do sleep 0.05; done`,
			nil, true, false, true, 2},
		{"ready, killed by SIGTERM", `echo MARK$((1+1)); exec sleep 60`, DialCheck(open), true, false, false, 1},
		{"exits during startup", `echo MARK$((1+1)); exit 3`, func(context.Context) error { return errors.New("never") }, false, true, true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The log's header holds the script; MARK2 is only in its output.
			p, err := StartProcess(ProcessSpec{Name: "sh", Bin: "/bin/sh", Args: []string{"-c", tc.script},
				LogPath: filepath.Join(t.TempDir(), "log")})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Kill()
			check := tc.check
			if check == nil {
				check = func(context.Context) error {
					if n, err := p.CountLogLines("MARK2"); err != nil || n < tc.logLines {
						return fmt.Errorf("%d marker lines (%v)", n, err)
					}
					return nil
				}
			}
			err = p.WaitReady(context.Background(), 10*time.Second, check)
			if (err == nil) != tc.ready || errors.Is(err, ErrExited) != tc.exited {
				t.Fatalf("WaitReady = %v; want ready=%v exited=%v", err, tc.ready, tc.exited)
			}
			// The output comes before the script waits or exits: read the
			// log once the marker lines are there (or the process is gone).
			var n int
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if n, err = p.CountLogLines("MARK2"); err != nil {
					t.Fatal(err)
				}
				if n >= tc.logLines || p.Exited() {
					break
				}
			}
			if n != tc.logLines {
				t.Errorf("CountLogLines = %d, want %d; log:\n%s", n, tc.logLines, p.LogTail(10))
			}
			if err := p.Stop(10 * time.Second); (err == nil) != tc.stopOK {
				t.Errorf("Stop = %v, want ok=%v", err, tc.stopOK)
			}
			if !p.Exited() {
				t.Error("the process is still running after Stop")
			}
			if !strings.Contains(p.LogTail(10), "MARK2") {
				t.Errorf("LogTail misses the output:\n%s", p.LogTail(10))
			}
		})
	}
}

func TestStartSluiceConfigErrors(t *testing.T) {
	root := t.TempDir()
	ok := DefaultSluiceConfig(root)
	ok.Bin = "/bin/sh" // exists; Validate checks no more of it
	tests := []struct {
		name   string
		mutate func(*SluiceConfig)
		want   string
	}{
		{"valid", func(*SluiceConfig) {}, ""},
		{"missing binary", func(c *SluiceConfig) { c.Bin = filepath.Join(root, "nope") }, "run make build"},
		{"unknown backend", func(c *SluiceConfig) { c.Backend = "etcd" }, `backend "etcd"`},
		{"redis without address", func(c *SluiceConfig) { c.Backend = "redis" }, "needs RedisAddr"},
		{"no start timeout", func(c *SluiceConfig) { c.StartTimeout = 0 }, "StartTimeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}
