package odataserver

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/internal/testenv"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Server is a running `sluice odata`.
type Server struct {
	Root string   // service root, http://127.0.0.1:<port>/v1/odata/v4
	Keys []string // API keys, one per client that must not share
	PID  int
	Log  string // the server's stdout and stderr, until Stop
	cmd  *exec.Cmd
	work string
	done chan struct{}
}

// Start generates rows observations, creates nkeys API keys and starts the
// server with bin (bin/sluice when empty), limited to rps requests per
// second per key (0: no per-second limit, so a scenario measures serving,
// not pacing; one request in flight per key always holds). It waits
// (bounded) until the server answers. extra are further flags of
// `sluice odata`.
func Start(bin string, rows, nkeys, rps int, extra ...string) (*Server, error) {
	if bin == "" {
		bin = "bin/sluice"
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("odataserver: %s: %w (run make build)", bin, err)
	}
	work, err := os.MkdirTemp("", "sluice-odata-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Server, error) { os.RemoveAll(work); return nil, err }
	dsn := "sqlite:" + filepath.Join(work, "odata.sqlite")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(ctx, bin, "generate", "-db", dsn, "-rows", fmt.Sprint(rows)).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("sluice generate: %v\n%s", err, b))
	}
	s := &Server{work: work, done: make(chan struct{})}
	for i := 0; i < nkeys; i++ {
		b, err := exec.CommandContext(ctx, bin, "keys", "add", "-db", dsn, fmt.Sprintf("load-%d", i)).CombinedOutput()
		if err != nil {
			return fail(fmt.Errorf("sluice keys add: %v\n%s", err, b))
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		s.Keys = append(s.Keys, strings.TrimSpace(lines[len(lines)-1]))
	}
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return fail(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	s.Log = filepath.Join(work, "server.log")
	logf, err := os.Create(s.Log)
	if err != nil {
		return fail(err)
	}
	s.cmd = exec.Command(bin, append([]string{"odata", "-db", dsn, "-odata-addr", addr, "-requests-per-second", fmt.Sprint(rps)}, extra...)...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return fail(err)
	}
	s.PID = s.cmd.Process.Pid
	s.Root = "http://" + addr + "/v1/odata/v4"
	go func() {
		_ = s.cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	if err := waitHTTP(s.Root, 30*time.Second, s.done); err != nil {
		b, _ := os.ReadFile(filepath.Join(work, "server.log"))
		s.Stop()
		return nil, fmt.Errorf("%w\n%s", err, b)
	}
	return s, nil
}

// Stop sends SIGTERM, waits (bounded), kills if needed, and removes files.
func (s *Server) Stop() {
	_ = syscall.Kill(s.PID, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.PID, syscall.SIGKILL)
		<-s.done
	}
	os.RemoveAll(s.work)
}

// waitHTTP polls u until it answers with any status, the process exits, or timeout passes.
func waitHTTP(u string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	c := http.Client{Timeout: time.Second}
	for {
		select {
		case <-exited:
			return errors.New("odataserver: sluice odata exited during startup")
		default:
		}
		resp, err := c.Get(u)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("odataserver: %s not answering after %s: %w", u, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
