package odataserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Server is a running `sluice odata`.
type Server struct {
	Root string   // service root, http://127.0.0.1:<port>/v1/odata/v4
	Keys []string // API keys, one per client that must not share
	PID  int
	Log  string // the server's stdout and stderr, until Stop
	p    *testenv.Process
	work string
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
	if err := testenv.SluiceGenerate(ctx, bin, dsn, rows); err != nil {
		return fail(err)
	}
	s := &Server{work: work}
	for i := 0; i < nkeys; i++ {
		key, err := testenv.SluiceAddKey(ctx, bin, dsn, fmt.Sprintf("load-%d", i))
		if err != nil {
			return fail(err)
		}
		s.Keys = append(s.Keys, key)
	}
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return fail(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	s.Log = filepath.Join(work, "server.log")
	p, err := testenv.StartProcess(testenv.ProcessSpec{Name: "sluice odata", Bin: bin, LogPath: s.Log,
		Args: append([]string{"odata", "-db", dsn, "-odata-addr", addr, "-requests-per-second", fmt.Sprint(rps)}, extra...)})
	if err != nil {
		return fail(err)
	}
	s.p, s.PID = p, p.PID()
	s.Root = "http://" + addr + "/v1/odata/v4"
	// Any answer will do: the service root needs no key, but it is up.
	if err := p.WaitReady(context.Background(), 30*time.Second, testenv.HTTPCheck(s.Root, false)); err != nil {
		p.Kill()
		os.RemoveAll(work)
		return nil, fmt.Errorf("odataserver: %w\n%s", err, p.LogTail(40))
	}
	return s, nil
}

// Stop sends SIGTERM, waits (bounded), kills if needed, and removes files.
func (s *Server) Stop() {
	_ = s.p.Stop(15 * time.Second)
	os.RemoveAll(s.work)
}
