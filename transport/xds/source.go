package xds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	sotw "github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/engine"
)

// TypeURL is the resource type the source subscribes to.
const TypeURL = resource.RateLimitConfigType

// Options are what a Source needs besides its settings.
type Options struct {
	Logger *slog.Logger
	// Validate checks a configuration before it is acknowledged (the service
	// passes its own loader with the current MERGE_DOMAIN_CONFIG); an error
	// NACKs the response. Nil accepts everything that unmarshals.
	Validate func([]engine.ConfigFile) error
	// Rand returns a number in [0, 1) for the retry jitter; math/rand when nil.
	Rand func() float64
}

// Deliver hands one configuration to the service: the files of an accepted
// response, or the validation error of a rejected one (so that the service
// counts and logs it as a failed load). It returns false when the service
// is stopping. The response is ACKed after it returns, so it should return
// once the configuration is in use.
type Deliver func(files []engine.ConfigFile, err error) bool

// Source is an xDS SotW client for rate limit configuration.
type Source struct {
	s    Settings
	o    Options
	node *core.Node
	dial []grpc.DialOption
	call []grpc.CallOption
}

// New checks the settings and reads the TLS files; it connects to nothing yet.
func New(s Settings, o Options) (*Source, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	src := &Source{s: s, o: o, node: &core.Node{Id: s.NodeID}}
	if len(s.NodeMetadata) > 0 {
		fields := make(map[string]any, len(s.NodeMetadata))
		for k, v := range s.NodeMetadata {
			fields[k] = v
		}
		md, err := structpb.NewStruct(fields)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_NODE_METADATA: %w", err)
		}
		src.node.Metadata = md
	}
	creds := insecure.NewCredentials()
	if s.UseTLS {
		cfg, err := s.tlsConfig()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	}
	src.dial = []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if s.MaxRecvMsgSize > 0 {
		src.call = append(src.call, grpc.MaxCallRecvMsgSize(s.MaxRecvMsgSize))
	}
	return src, nil
}

func (s Settings) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerSAN}
	if s.ServerCAFile != "" {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(s.ServerCAFile)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: no PEM certificate in %s", s.ServerCAFile)
		}
		cfg.RootCAs = pool
	}
	if s.ClientCertFile != "" {
		pair, err := tls.LoadX509KeyPair(s.ClientCertFile, s.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT/KEY: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Run keeps a stream to the management server open until ctx ends, handing
// every configuration to deliver. It returns nil when ctx ends.
func (s *Source) Run(ctx context.Context, deliver Deliver) error {
	failures := 0 // streams broken since the last response
	for {
		opened, err := s.session(ctx, deliver, func() { failures = 0 })
		if ctx.Err() != nil {
			return nil
		}
		wait := s.retryWait() // linear, as the reference's connect retry
		if opened {
			wait = s.backoff(failures)
			failures++
		}
		s.o.Logger.Warn("xDS: no stream to the management server; retrying",
			"server", s.s.ServerURL, "in", wait.String(), "error", err)
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// backoff is the wait after the n-th consecutive broken stream (n from 0).
func (s *Source) backoff(n int) time.Duration {
	d := float64(s.s.BackoffInitial)
	for i := 0; i < n && d < float64(s.s.BackoffMax); i++ {
		d *= 2
	}
	d = min(d, float64(s.s.BackoffMax))
	if s.s.BackoffJitter && s.s.BackoffRandomFactor > 0 {
		f := s.s.BackoffRandomFactor
		d *= 1 - f + 2*f*s.o.Rand()
	}
	return time.Duration(d)
}

// session runs one stream. opened tells whether the server was reached.
func (s *Source) session(ctx context.Context, deliver Deliver, responded func()) (opened bool, err error) {
	conn, err := grpc.NewClient(s.s.ServerURL, s.dial...)
	if err != nil {
		return false, fmt.Errorf("xDS server %s: %w", s.s.ServerURL, err)
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(s.s.Headers) > 0 {
		sctx = metadata.NewOutgoingContext(sctx, metadata.New(s.s.Headers))
	}
	client := sotw.NewADSClient(sctx, s.node, TypeURL)
	if err := client.InitConnect(conn, s.call...); err != nil {
		return false, fmt.Errorf("opening the ADS stream: %w", err)
	}
	s.o.Logger.Info("xDS: subscribed to rate limit configuration", "server", s.s.ServerURL, "node", s.s.NodeID)
	var (
		rejected    [sha256.Size]byte // the last response NACKed, and why
		rejectedErr string
	)
	for {
		resp, err := client.Fetch()
		if err != nil {
			return true, fmt.Errorf("receiving from the ADS stream: %w", err)
		}
		responded()
		sum := digest(resp.Resources)
		if rejectedErr != "" && sum == rejected {
			// A snapshot cache answers a NACK, which names the older version,
			// by sending the rejected set again. Answer again, but not in a
			// tight loop, and without counting one rejection many times.
			if !sleep(ctx, s.retryWait()) {
				return true, ctx.Err()
			}
			if err := client.Nack(rejectedErr); err != nil {
				return true, fmt.Errorf("sending NACK: %w", err)
			}
			continue
		}
		rejectedErr = ""
		files, err := toFiles(resp.Resources)
		if err == nil && s.o.Validate != nil {
			if verr := s.o.Validate(files); verr != nil {
				// The service counts and logs it as a failed load.
				if !deliver(nil, verr) {
					return true, ctx.Err()
				}
				err = verr
			}
		} else if err != nil {
			s.o.Logger.Error("xDS: rejecting configuration: " + err.Error())
		}
		if err != nil {
			rejected, rejectedErr = sum, err.Error()
			if err := client.Nack(rejectedErr); err != nil {
				return true, fmt.Errorf("sending NACK: %w", err)
			}
			continue
		}
		if !deliver(files, nil) {
			return true, ctx.Err()
		}
		if err := client.Ack(); err != nil {
			return true, fmt.Errorf("sending ACK: %w", err)
		}
	}
}

// retryWait is CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL ±50%.
func (s *Source) retryWait() time.Duration {
	return time.Duration(float64(s.s.ConnectRetryInterval) * (0.5 + s.o.Rand()))
}

// sleep waits d or until ctx ends; false means ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// digest identifies a response's resources.
func digest(resources []*anypb.Any) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, r := range resources {
		for _, part := range [][]byte{[]byte(r.GetTypeUrl()), r.GetValue()} {
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write(part)
		}
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}
