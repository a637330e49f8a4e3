package standin

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/loadtest/internal/harness"
	"github.com/sluicehq/sluice/odata"
)

// ServeFlags are the child's flags, set by Start. A program that uses Start
// calls RegisterFlags before flag.Parse and, when Enabled, runs Serve
// instead of its own work.
type ServeFlags struct {
	enabled bool
	db      string
	addr    string
	keysOut string
	rows    int
	keys    int
}

// RegisterFlags adds the child's flags to the program's command line.
func RegisterFlags() *ServeFlags {
	s := &ServeFlags{}
	flag.BoolVar(&s.enabled, "internal-serve", false, "internal: run as the stand-in OData server")
	flag.StringVar(&s.db, "internal-db", "", "internal: SQLite file")
	flag.StringVar(&s.addr, "internal-addr", "", "internal: listen address")
	flag.StringVar(&s.keysOut, "internal-keys-out", "", "internal: file to write the API keys to, one a line")
	flag.IntVar(&s.rows, "internal-rows", 0, "internal: rows to generate")
	flag.IntVar(&s.keys, "internal-keys", 0, "internal: API keys to create")
	return s
}

// Enabled reports that this process is the child.
func (s *ServeFlags) Enabled() bool { return s.enabled }

// Serve serves until SIGTERM or SIGINT, then shuts down (bounded).
func (s *ServeFlags) Serve() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	db, err := odata.OpenStore(ctx, "sqlite:"+s.db)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := odata.EnsureDemo(ctx, db, s.rows, nil); err != nil {
		return err
	}
	var keys []string
	for i := range s.keys {
		k, _, err := db.AddKey(ctx, fmt.Sprintf("slow-reader-%d", i))
		if err != nil {
			return err
		}
		keys = append(keys, k)
	}
	opts := odata.DefaultOptions()
	srv, err := odata.NewServer(opts, db, db, nil)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	// The keys file appears only once the listener is open: it is the
	// parent's readiness signal.
	tmp := s.keysOut + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		ln.Close()
		return err
	}
	if err := os.Rename(tmp, s.keysOut); err != nil {
		ln.Close()
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	return errors.Join(err, <-errc)
}

// Server is the running child.
type Server struct {
	Root string   // service root, http://127.0.0.1:<port>/v1/odata/v4
	Keys []string // API keys, one per client that must not share
	PID  int

	cmd  *exec.Cmd
	work string
	done chan struct{}
}

// Start starts the child with rows of generated data and nkeys API keys,
// and waits (bounded) for its keys and listener.
func Start(rows, nkeys int) (*Server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "sluice-slow-reader-")
	if err != nil {
		return nil, err
	}
	ports, err := harness.FreePorts(1)
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	keysOut := filepath.Join(work, "keys")
	logf, err := os.Create(filepath.Join(work, "server.log"))
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	cmd := exec.Command(self, "-internal-serve", "-internal-db", filepath.Join(work, "odata.sqlite"),
		"-internal-addr", addr, "-internal-keys-out", keysOut,
		"-internal-rows", strconv.Itoa(rows), "-internal-keys", strconv.Itoa(nkeys))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(work)
		return nil, err
	}
	s := &Server{Root: "http://" + addr + "/v1/odata/v4", PID: cmd.Process.Pid, cmd: cmd, work: work, done: make(chan struct{})}
	// Owned by s: reaps the child; stop waits for it.
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	deadline := time.Now().Add(3 * time.Minute) // data generation included
	for {
		select {
		case <-s.done:
			b, _ := os.ReadFile(filepath.Join(work, "server.log"))
			os.RemoveAll(work)
			return nil, fmt.Errorf("stand-in OData server exited during startup:\n%s", b)
		default:
		}
		if f, err := os.Open(keysOut); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if k := strings.TrimSpace(sc.Text()); k != "" {
					s.Keys = append(s.Keys, k)
				}
			}
			f.Close()
			break
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("stand-in OData server not ready after 3 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := waitHTTP(s.Root, 10*time.Second); err != nil {
		s.Stop()
		return nil, err
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

// waitHTTP polls u until it answers with any status, or timeout passes.
func waitHTTP(u string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get(u)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("standin: %s not answering after %s: %w", u, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
