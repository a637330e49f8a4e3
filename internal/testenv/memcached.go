package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// MemcachedOptions selects how memcached is started.
type MemcachedOptions struct {
	// TLS serves TLS only (memcached -Z) with certificates from GenerateTLS;
	// clients must present ClientCert/ClientKey.
	TLS bool
}

// Memcached is a running memcached.
type Memcached struct {
	Addr     string
	TLSFiles // PEM file paths when TLS
	Dir      string

	tls  bool
	bin  string
	args []string
	log  string
	srv  server
}

// StartMemcached starts a plain memcached on a free loopback port and stops
// it in Cleanup.
func StartMemcached(t TB) *Memcached {
	t.Helper()
	return StartMemcachedWith(t, MemcachedOptions{})
}

var (
	mcTLSOnce sync.Once
	mcTLS     bool
)

// StartMemcachedWith starts memcached with options and stops it in Cleanup.
func StartMemcachedWith(t TB, o MemcachedOptions) *Memcached {
	t.Helper()
	bin, ok := lookBinary(t, "memcached", "memcached")
	if !ok {
		return nil
	}
	m := &Memcached{Dir: t.TempDir(), bin: bin, tls: o.TLS}
	m.log = filepath.Join(m.Dir, "memcached.log")
	if o.TLS {
		mcTLSOnce.Do(func() {
			out, _ := exec.Command(bin, "-h").CombinedOutput()
			mcTLS = strings.Contains(string(out), "enable-ssl")
		})
		if !mcTLS {
			unavailable(t, "%s was built without TLS support (no -Z/--enable-ssl)", bin)
			return nil
		}
		m.CACert, m.ClientCert, m.ClientKey = GenerateTLS(t, filepath.Join(m.Dir, "tls"))
	}
	t.Cleanup(m.Kill)
	configure := func() error {
		port, err := freePort()
		if err != nil {
			return err
		}
		m.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		m.args = []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-m", "64", "-t", "2", "-c", "1024"}
		if os.Geteuid() == 0 {
			// memcached refuses to run as root without -u. It stays root:
			// the certificates live in a 0700 temp dir.
			m.args = append(m.args, "-u", "root")
		}
		if o.TLS {
			m.args = append(m.args, "-Z", "-o", fmt.Sprintf("ssl_chain_cert=%s,ssl_key=%s,ssl_ca_cert=%s,ssl_verify_mode=2",
				m.ClientCert, m.ClientKey, m.CACert))
		}
		return nil
	}
	err := startOnFreePorts(configure, m.start)
	if err == nil {
		return m
	}
	t.Fatalf("testenv: start memcached: %v\nlog tail:\n%s", err, logTail(m.log, 40))
	return nil
}

func (m *Memcached) start() error {
	var tcfg *tls.Config
	if m.tls {
		var err error
		if tcfg, err = ClientTLSConfig(m.CACert, m.ClientCert, m.ClientKey); err != nil {
			return err
		}
	}
	return m.srv.start(ProcessSpec{Name: "memcached", Bin: m.bin, Args: m.args, Dir: m.Dir, LogPath: m.log},
		func(ctx context.Context) error { return mcVersion(ctx, m.Addr, tcfg) })
}

func mcVersion(ctx context.Context, addr string, tcfg *tls.Config) error {
	line, err := lineReply(ctx, "tcp", addr, tcfg, "version")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "VERSION ") {
		return fmt.Errorf("version reply %q", strings.TrimSpace(line))
	}
	return nil
}

// Kill SIGKILLs memcached, for failure tests. Calling it twice is fine.
func (m *Memcached) Kill() { m.srv.kill() }

// Restart starts memcached again after Kill, on the same port (empty).
func (m *Memcached) Restart(t TB) {
	t.Helper()
	m.srv.restart(t, "memcached", m.log, m.start)
}
