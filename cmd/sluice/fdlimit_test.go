package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/testenv"
)

// fdLimit is the child's open-file limit (prlimit --nofile).
const fdLimit = 256

// fdChild is `sluice serve` running under prlimit with fdLimit open files.
type fdChild struct {
	proc                    *testenv.Process
	odata, grpc, http, dbug string
}

// startFDChild starts `sluice serve` as a child process with an open-file
// limit of fdLimit, and waits until every port answers.
func startFDChild(t *testing.T, env map[string]string, args ...string) *fdChild {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	ports, err := testenv.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	vars := serverEnv(t, map[string]string{"GRPC_PORT": strconv.Itoa(ports[1]), "PORT": strconv.Itoa(ports[2]),
		"DEBUG_PORT": strconv.Itoa(ports[3]), "LOG_LEVEL": "warn", "SLUICE_TEST_MAIN": "1"}, "")
	for k, v := range env {
		vars[k] = v
	}
	environ := os.Environ()
	for k, v := range vars {
		environ = append(environ, k+"="+v)
	}
	db := "sqlite:" + filepath.Join(t.TempDir(), "o.sqlite")
	all := append([]string{"--nofile=" + strconv.Itoa(fdLimit) + ":" + strconv.Itoa(fdLimit), "--", os.Args[0], "serve",
		"-db", db, "-odata-addr", addr(0), "-demo-rows", "200", "-access-log=false"}, args...)
	p, err := testenv.StartProcess(testenv.ProcessSpec{Name: "sluice serve", Bin: prlimit, Args: all,
		LogPath: filepath.Join(t.TempDir(), "serve.log"), Env: environ})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(15 * time.Second) })
	c := &fdChild{proc: p, odata: addr(0), grpc: addr(1), http: addr(2), dbug: addr(3)}
	if err := p.WaitReady(context.Background(), 60*time.Second, testenv.HTTPCheck("http://"+c.http+"/healthcheck", true)); err != nil {
		t.Fatalf("serve did not start: %v\n%s", err, p.LogTail(30))
	}
	return c
}

// flood opens n connections to addr and holds them until the test ends or
// the returned function closes them; a dial that fails ends the flood.
func flood(t *testing.T, addr string, n int) (conns []net.Conn, release func()) {
	t.Helper()
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	release = func() {
		for _, c := range conns {
			c.Close()
		}
	}
	t.Cleanup(release)
	return conns, release
}

// answers checks each port with a real request: the OData service document,
// /healthcheck, the debug port's /rlconfig and a gRPC health check.
func (c *fdChild) answers() error {
	client := &http.Client{Timeout: 2 * time.Second}
	odataURL := "http://" + c.odata + "/v1/odata/v4/"
	for _, u := range []string{odataURL, "http://" + c.http + "/healthcheck", "http://" + c.dbug + "/rlconfig"} {
		resp, err := client.Get(u)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// The OData port answers 401 without a key: an answer is what counts.
		if resp.StatusCode != 200 && !(u == odataURL && resp.StatusCode == 401) {
			return fmt.Errorf("%s: %s", u, resp.Status)
		}
	}
	cc, err := grpc.NewClient(c.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// Twice the open-file limit in bare TCP connections, on every port at once
// and with no connection cap: each server runs out of file descriptors
// (accept4: EMFILE), waits it out, and serves again once the flood is
// gone. The process used to exit 1 on the first EMFILE.
func TestFDExhaustionIsWaitedOut(t *testing.T) {
	c := startFDChild(t, map[string]string{"SLUICE_GRPC_MAX_CONNECTIONS": "-1",
		"SLUICE_HTTP_MAX_CONNECTIONS": "-1", "SLUICE_DEBUG_MAX_CONNECTIONS": "-1"}, "-odata-max-connections", "-1")
	var releases []func()
	held := 0
	for _, addr := range []string{c.odata, c.grpc, c.http, c.dbug} {
		conns, release := flood(t, addr, 2*fdLimit)
		held += len(conns)
		releases = append(releases, release)
	}
	testenv.Eventually(t, "the servers to run out of file descriptors", func() bool {
		n, _ := c.proc.CountLogLines("accept failed; retrying")
		return n > 0 || c.proc.Exited()
	})
	if c.proc.Exited() {
		t.Fatalf("sluice serve exited under %d connections (limit %d):\n%s", held, fdLimit, c.proc.LogTail(20))
	}
	for _, r := range releases {
		r()
	}
	var last error
	testenv.EventuallyWithin(t, 30*time.Second, "every port to answer after the flood", func() bool {
		last = c.answers()
		return last == nil || c.proc.Exited()
	})
	if c.proc.Exited() {
		t.Fatalf("sluice serve exited after the flood (%v):\n%s", last, c.proc.LogTail(20))
	}
	n, _ := c.proc.CountLogLines("accept failed; retrying")
	t.Logf("%d connections held against a limit of %d; %d accept-failure lines (EMFILE, at most one a minute per port) logged; every port waited it out", held, fdLimit, n)
}

// With the default caps (shares of the open-file limit), a flood of the
// public OData port is refused at its cap (503 with Retry-After) before
// the process runs out of descriptors, and the rate limit ports go on
// answering throughout; the gRPC port refuses with an HTTP/2 GOAWAY.
func TestConnectionCapRefusesPolitely(t *testing.T) {
	c := startFDChild(t, nil)
	conns, _ := flood(t, c.odata, 2*fdLimit)
	refused := refusedHTTP(conns)
	if refused == 0 || refused == len(conns) {
		t.Fatalf("%d of %d connections beyond the cap were refused with 503", refused, len(conns))
	}
	if err := c.answers2(); err != nil {
		t.Fatalf("the rate limit ports under an OData flood: %v\n%s", err, c.proc.LogTail(20))
	}
	gconns, _ := flood(t, c.grpc, 2*fdLimit)
	goaways := 0
	for _, conn := range gconns {
		_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		var hdr [18]byte
		if _, err := io.ReadFull(conn, hdr[:]); err == nil && hdr[3] == 0x4 && hdr[12] == 0x7 {
			goaways++
		}
	}
	if goaways == 0 {
		t.Fatalf("no gRPC connection beyond the cap was sent a GOAWAY (%d held)", len(gconns))
	}
	if c.proc.Exited() {
		t.Fatalf("sluice serve exited:\n%s", c.proc.LogTail(20))
	}
	t.Logf("OData: %d of %d connections refused 503; gRPC: %d of %d sent GOAWAY (limit %d)", refused, len(conns), goaways, len(gconns), fdLimit)
}

// answers2 checks the rate limit service's HTTP and gRPC ports only.
func (c *fdChild) answers2() error {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + c.http + "/healthcheck")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("/healthcheck: %s", resp.Status)
	}
	return nil
}

// refusedHTTP is how many of conns were refused with an HTTP 503 (netx's
// polite refusal) within 50 ms each.
func refusedHTTP(conns []net.Conn) int {
	refused := 0
	for _, conn := range conns {
		_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err == nil && strings.HasPrefix(line, "HTTP/1.1 503") {
			refused++
		}
	}
	return refused
}
