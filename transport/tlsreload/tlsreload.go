package tlsreload

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicehq/sluice/internal/fswatch"
)

// Settings are the gRPC server's TLS variables.
type Settings struct {
	Enabled      bool   // GRPC_SERVER_USE_TLS
	CertFile     string // GRPC_SERVER_TLS_CERT: certificate chain, PEM
	KeyFile      string // GRPC_SERVER_TLS_KEY: private key, PEM
	ClientCAFile string // GRPC_CLIENT_TLS_CACERT: when set, clients must present a certificate it signed
	ClientSAN    string // GRPC_CLIENT_TLS_SAN: a DNS name the client certificate must carry
}

// Validate reports settings that cannot work.
func (s Settings) Validate() error {
	if !s.Enabled {
		if s.ClientCAFile != "" || s.ClientSAN != "" {
			return errors.New("GRPC_CLIENT_TLS_CACERT and GRPC_CLIENT_TLS_SAN need GRPC_SERVER_USE_TLS=true")
		}
		return nil
	}
	if s.CertFile == "" || s.KeyFile == "" {
		return errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	if s.ClientSAN != "" && s.ClientCAFile == "" {
		return errors.New("GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT: the SAN is checked on a verified client certificate")
	}
	return nil
}

// Options are what a Reloader needs besides its settings.
type Options struct {
	Logger *slog.Logger
	// OnReload, when set, is told the outcome of every reload after the first
	// load (nil when the new material is in use).
	OnReload func(error)
	// Settle is how long a burst of file events must be quiet before a reload
	// (a rotation writes several files); default 100ms.
	Settle time.Duration
}

// material is one consistent set of TLS files, swapped as a whole.
type material struct {
	cert   *tls.Certificate
	config *tls.Config // what a handshake uses
}

// Reloader holds the current material and replaces it when the files change.
type Reloader struct {
	s   Settings
	o   Options
	cur atomic.Pointer[material]
}

// New loads the files once; failing to do so is an error.
func New(s Settings, o Options) (*Reloader, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if !s.Enabled {
		return nil, errors.New("tlsreload: TLS is not enabled")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Settle <= 0 {
		o.Settle = 100 * time.Millisecond
	}
	r := &Reloader{s: s, o: o}
	m, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur.Store(m)
	return r, nil
}

// TLSConfig is the server configuration; every handshake uses the material
// current at that moment.
func (r *Reloader) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.cur.Load().config, nil
		},
	}
}

// Certificate is the server certificate in use.
func (r *Reloader) Certificate() *tls.Certificate { return r.cur.Load().cert }

// Reload reads the files again. On failure the material in use stays.
func (r *Reloader) Reload() error {
	m, err := r.load()
	if err == nil {
		r.cur.Store(m)
		r.o.Logger.Info("reloaded gRPC server TLS certificate", "cert", r.s.CertFile)
	} else {
		r.o.Logger.Error("gRPC server TLS reload failed; keeping the certificate in use", "error", err)
	}
	if r.o.OnReload != nil {
		r.o.OnReload(err)
	}
	return err
}

func (r *Reloader) load() (*material, error) {
	cert, err := tls.LoadX509KeyPair(r.s.CertFile, r.s.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading GRPC_SERVER_TLS_CERT/KEY: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	if r.s.ClientCAFile != "" {
		pem, err := os.ReadFile(r.s.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("loading GRPC_CLIENT_TLS_CACERT: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("loading GRPC_CLIENT_TLS_CACERT: no PEM certificate in %s", r.s.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if r.s.ClientSAN != "" {
			cfg.VerifyPeerCertificate = verifyClientSAN(pool, r.s.ClientSAN)
		}
	}
	return &material{cert: &cert, config: cfg}, nil
}

// verifyClientSAN checks the client chain again, now requiring the SAN as a
// DNS name and client-auth usage, as the reference does.
func verifyClientSAN(roots *x509.CertPool, san string) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("tls: no client certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, der := range raw {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return fmt.Errorf("tls: client certificate: %w", err)
			}
			certs[i] = c
		}
		opts := x509.VerifyOptions{
			Roots:         roots,
			Intermediates: x509.NewCertPool(),
			DNSName:       san,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		for _, c := range certs[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := certs[0].Verify(opts); err != nil {
			return fmt.Errorf("tls: client certificate does not match GRPC_CLIENT_TLS_SAN %q: %w", san, err)
		}
		return nil
	}
}

// dirs are the directories holding the watched files.
func (r *Reloader) dirs() []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range []string{r.s.CertFile, r.s.KeyFile, r.s.ClientCAFile} {
		if f == "" {
			continue
		}
		d := filepath.Dir(f)
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// Watch reloads whenever something changes in the files' directories, until
// ctx ends. Directories rather than files are watched so that a rename or a
// symlink swap (as Kubernetes does for secrets) is seen too.
func (r *Reloader) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching TLS files: %w", err)
	}
	defer w.Close()
	dirs := r.dirs()
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			return fmt.Errorf("watching TLS directory %s: %w", d, err)
		}
	}
	event := func(ev fsnotify.Event) bool {
		return ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove|fsnotify.Chmod) != 0
	}
	settled := func() bool {
		for _, d := range dirs {
			_ = w.Add(d) // the directory may have been replaced
		}
		_ = r.Reload()
		return true
	}
	fswatch.Settled(ctx, w, r.o.Settle, event, settled, func(err error) {
		r.o.Logger.Warn("TLS file watcher", "error", err)
	})
	return nil
}
