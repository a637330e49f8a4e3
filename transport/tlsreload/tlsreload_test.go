package tlsreload

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor's log throttle (the service's shards) outlives a test by design.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
	)
}

// pki is a test CA that signs leaf certificates.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64 = 100

func nextSerial() *big.Int { serial++; return big.NewInt(serial) }

func newCA(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &pki{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf signs a certificate for dns names with the given usages and returns
// its PEM certificate and key, and its serial.
func (p *pki) leaf(t *testing.T, dns []string, usage ...x509.ExtKeyUsage) (certPEM, keyPEM []byte, sn *big.Int) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sn = nextSerial()
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		DNSNames: dns, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), sn
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// serve runs a gRPC server with the reloader's credentials on loopback.
func serve(t *testing.T, r *Reloader) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(r.TLSConfig())))
	healthpb.RegisterHealthServer(g, health.NewServer())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); wg.Wait() })
	return ln.Addr().String()
}

// check makes one gRPC health call with the client TLS config.
func check(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func clientConfig(t *testing.T, ca *pki, certPEM, keyPEM []byte) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// servedSerial is the serial of the certificate the server presents now.
func servedSerial(t *testing.T, addr string, ca *pki) *big.Int {
	t.Helper()
	cfg := clientConfig(t, ca, nil, nil)
	cfg.NextProtos = []string{"h2"}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

func TestSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		s    Settings
		want string
	}{
		{Settings{}, ""},
		{Settings{Enabled: true, CertFile: "c", KeyFile: "k"}, ""},
		{Settings{Enabled: true, CertFile: "c", KeyFile: "k", ClientCAFile: "ca", ClientSAN: "x"}, ""},
		{Settings{Enabled: true, CertFile: "c"}, "GRPC_SERVER_TLS_KEY"},
		{Settings{Enabled: true, CertFile: "c", KeyFile: "k", ClientSAN: "x"}, "needs GRPC_CLIENT_TLS_CACERT"},
		{Settings{ClientCAFile: "ca"}, "GRPC_SERVER_USE_TLS"},
	} {
		err := tc.s.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.s, err, tc.want)
		}
	}
}

func TestFirstLoadFailureIsAnError(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	cert, key, _ := ca.leaf(t, []string{"localhost"}, x509.ExtKeyUsageServerAuth)
	write(t, filepath.Join(dir, "cert.pem"), cert)
	write(t, filepath.Join(dir, "key.pem"), key)
	write(t, filepath.Join(dir, "bad.pem"), []byte("not a certificate"))
	for _, s := range []Settings{
		{Enabled: true, CertFile: filepath.Join(dir, "missing.pem"), KeyFile: filepath.Join(dir, "key.pem")},
		{Enabled: true, CertFile: filepath.Join(dir, "bad.pem"), KeyFile: filepath.Join(dir, "key.pem")},
		{Enabled: true, CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"), ClientCAFile: filepath.Join(dir, "bad.pem")},
		{Enabled: true, CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"), ClientCAFile: filepath.Join(dir, "missing.pem")},
	} {
		if _, err := New(s, Options{}); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := newCA(t, "ca"), newCA(t, "other")
	srvCert, srvKey, _ := ca.leaf(t, []string{"localhost"}, x509.ExtKeyUsageServerAuth)
	write(t, filepath.Join(dir, "cert.pem"), srvCert)
	write(t, filepath.Join(dir, "key.pem"), srvKey)
	write(t, filepath.Join(dir, "ca.pem"), ca.pem)
	good, goodKey, _ := ca.leaf(t, []string{"envoy.mesh"}, x509.ExtKeyUsageClientAuth)
	wrongSAN, wrongSANKey, _ := ca.leaf(t, []string{"intruder.mesh"}, x509.ExtKeyUsageClientAuth)
	serverOnly, serverOnlyKey, _ := ca.leaf(t, []string{"envoy.mesh"}, x509.ExtKeyUsageServerAuth)
	foreign, foreignKey, _ := other.leaf(t, []string{"envoy.mesh"}, x509.ExtKeyUsageClientAuth)

	base := Settings{Enabled: true, CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	withCA := base
	withCA.ClientCAFile = filepath.Join(dir, "ca.pem")
	withSAN := withCA
	withSAN.ClientSAN = "envoy.mesh"

	for _, tc := range []struct {
		name      string
		s         Settings
		cert, key []byte
		ok        bool
	}{
		{"TLS, no client certificate", base, nil, nil, true},
		{"mTLS, no client certificate", withCA, nil, nil, false},
		{"mTLS, client certificate", withCA, good, goodKey, true},
		{"mTLS, certificate of another CA", withCA, foreign, foreignKey, false},
		{"mTLS, certificate without client-auth usage", withCA, serverOnly, serverOnlyKey, false},
		{"SAN, matching", withSAN, good, goodKey, true},
		{"SAN, wrong SAN", withSAN, wrongSAN, wrongSANKey, false},
		{"SAN, no client certificate", withSAN, nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, r)
			err = check(t, addr, clientConfig(t, ca, tc.cert, tc.key))
			if tc.ok != (err == nil) {
				t.Fatalf("health check: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestRotationAndBrokenRotation(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	cert1, key1, sn1 := ca.leaf(t, []string{"localhost"}, x509.ExtKeyUsageServerAuth)
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	write(t, certPath, cert1)
	write(t, keyPath, key1)

	reloads := make(chan error, 16)
	r, err := New(Settings{Enabled: true, CertFile: certPath, KeyFile: keyPath},
		Options{Settle: 20 * time.Millisecond, OnReload: func(err error) { reloads <- err }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watchDone := make(chan error, 1)
	go func() { watchDone <- r.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-watchDone; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	addr := serve(t, r)
	if got := servedSerial(t, addr, ca); got.Cmp(sn1) != 0 {
		t.Fatalf("serial %v, want %v", got, sn1)
	}

	// serving is the serial of the certificate the reloader holds.
	serving := func() *big.Int {
		t.Helper()
		c := r.Certificate()
		leaf := c.Leaf
		if leaf == nil {
			var err error
			if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
				t.Fatal(err)
			}
		}
		return leaf.SerialNumber
	}
	// waitReload waits for a reload with the wanted outcome after which
	// the reloader holds the certificate of serial. Any change in the
	// directory reloads (a secret manager may swap a symlink or rename
	// files): the writes of the rotation's new files reload the old ones,
	// successfully, and a reload between the two renames pairs the new
	// key with the old certificate and fails. Which of them happen
	// depends on the schedule.
	waitReload := func(wantOK bool, serial *big.Int) {
		t.Helper()
		deadline := time.After(testenv.EventuallyBound)
		for {
			select {
			case err := <-reloads:
				if (err == nil) == wantOK && serving().Cmp(serial) == 0 {
					return
				}
			case <-deadline:
				t.Fatalf("no reload with ok=%v serving serial %v in %v (serving %v)", wantOK, serial, testenv.EventuallyBound, serving())
			}
		}
	}

	// Rotation: an atomic replace of both files, as a secret manager does.
	cert2, key2, sn2 := ca.leaf(t, []string{"localhost"}, x509.ExtKeyUsageServerAuth)
	write(t, certPath+".new", cert2)
	write(t, keyPath+".new", key2)
	// The new files' writes reload the old ones, successfully: waited for
	// here, so that every run has the reload a busy machine's schedule
	// gave make test-stress, which the test took for the rotation.
	waitReload(true, sn1)
	if err := os.Rename(keyPath+".new", keyPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(certPath+".new", certPath); err != nil {
		t.Fatal(err)
	}
	waitReload(true, sn2)
	if got := servedSerial(t, addr, ca); got.Cmp(sn2) != 0 {
		t.Fatalf("after rotation serial %v, want %v", got, sn2)
	}
	if err := check(t, addr, clientConfig(t, ca, nil, nil)); err != nil {
		t.Fatalf("gRPC after rotation: %v", err)
	}

	// A broken certificate keeps the one in use.
	write(t, certPath, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n"))
	waitReload(false, sn2)
	if got := servedSerial(t, addr, ca); got.Cmp(sn2) != 0 {
		t.Fatalf("after a broken rotation serial %v, want %v", got, sn2)
	}
	if got := r.Certificate().Leaf; got != nil && got.SerialNumber.Cmp(sn2) != 0 {
		t.Fatalf("Certificate() serial %v", got.SerialNumber)
	}
}
