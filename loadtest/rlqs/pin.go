package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// pinning is -pin SERVER/CLIENT: the CPUs (taskset lists) the server and
// the probe process run on, and those the flooding client keeps to.
//
// Why: on a machine of few cores the flood's client, building and
// reading a thousand streams' messages, takes the cores the server needs,
// and the probe's latency then measures the client as much as the
// server. Real flooding Envoys run on other machines. Pinned, the server
// keeps its cores whatever the client does; the probe, a light Envoy
// that sends one report every 250 ms, shares them.
type pinning struct{ server, client string }

func parsePin(s string) (pinning, error) {
	if s == "" {
		return pinning{}, nil
	}
	server, client, ok := strings.Cut(s, "/")
	if !ok || !cpuList(server) || !cpuList(client) {
		return pinning{}, fmt.Errorf("-pin %q: want SERVER/CLIENT CPU lists, e.g. 1/0", s)
	}
	return pinning{server: server, client: client}, nil
}

// cpuList reports whether s is a taskset list of CPU numbers and ranges
// (1, 0-3, 0,2).
func cpuList(s string) bool {
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if _, err := strconv.ParseUint(lo, 10, 16); err != nil {
			return false
		}
		if _, err := strconv.ParseUint(hi, 10, 16); isRange && err != nil {
			return false
		}
	}
	return true
}

func (p pinning) on() bool { return p.server != "" }

// pinSelf moves every thread of this process to the client's CPUs
// (threads made later inherit it).
func (p pinning) pinSelf() error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", p.client, strconv.Itoa(os.Getpid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("-pin: taskset of the load client: %w: %s", err, out)
	}
	return nil
}

// wrap returns a script in dir that runs bin on the server's CPUs, to be
// started in bin's place (exec keeps its PID).
func (p pinning) wrap(dir, bin string) (string, error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", fmt.Errorf("-pin: %w", err)
	}
	path := filepath.Join(dir, "pinned-"+filepath.Base(bin))
	script := fmt.Sprintf("#!/bin/sh\nexec taskset -c %s %s \"$@\"\n", p.server, strconv.Quote(abs))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("-pin: %w", err)
	}
	return path, nil
}

// command is name with args, on the server's CPUs when pinned.
func (p pinning) command(name string, args ...string) *exec.Cmd {
	if !p.on() {
		return exec.Command(name, args...)
	}
	return exec.Command("taskset", append([]string{"-c", p.server, name}, args...)...)
}

// lookTaskset fails early, naming what is missing, when pinning needs a
// taskset that is not there.
func (p pinning) lookTaskset() error {
	if !p.on() {
		return nil
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return fmt.Errorf("-pin needs taskset (util-linux): %w", err)
	}
	return nil
}

// String is what the summary line says of the pinning.
func (p pinning) String() string {
	if !p.on() {
		return ""
	}
	return fmt.Sprintf(" (server and probe on CPUs %s, client on %s)", p.server, p.client)
}
