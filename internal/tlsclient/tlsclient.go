// Package tlsclient builds the client TLS configuration every outbound
// connection of sluice uses (Redis, memcached, the xDS server), the way the
// reference does: the CA file is added to the system roots, a client
// certificate is optional, and hostname verification can be skipped while
// the chain is still verified.
package tlsclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Optional is Config when enabled, and nil (plain connections) otherwise:
// the backends' *_TLS switch.
func Optional(enabled bool, caFile, certFile, keyFile string, skipHostname bool) (*tls.Config, error) {
	if !enabled {
		return nil, nil
	}
	return Config(caFile, certFile, keyFile, skipHostname)
}

// CheckPair reports a client certificate given without its key or a key
// without its certificate, which Config could only fail on later.
func CheckPair(certFile, keyFile string) error {
	if (certFile == "") != (keyFile == "") {
		return fmt.Errorf("TLS client certificate and key must be set together (cert %q, key %q)", certFile, keyFile)
	}
	return nil
}

// Config builds the configuration from file paths; empty paths are left out.
func Config(caFile, certFile, keyFile string, skipHostname bool) (*tls.Config, error) {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if caFile != "" {
		pemCA, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read TLS CA: %w", err)
		}
		if !roots.AppendCertsFromPEM(pemCA) {
			return nil, fmt.Errorf("TLS CA file %s holds no PEM certificate", caFile)
		}
	}
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if certFile != "" || keyFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if skipHostname {
		// InsecureSkipVerify turns off every check; VerifyConnection puts the
		// chain check back, without the name.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return cfg, nil
}
