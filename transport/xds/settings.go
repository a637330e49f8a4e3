package xds

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/kvlist"
)

// Settings are the CONFIG_GRPC_XDS_* and XDS_CLIENT_* variables.
type Settings struct {
	NodeID       string            // CONFIG_GRPC_XDS_NODE_ID
	NodeMetadata map[string]string // CONFIG_GRPC_XDS_NODE_METADATA, "k1=v1,k2=v2"
	ServerURL    string            // CONFIG_GRPC_XDS_SERVER_URL, host:port
	// ConnectRetryInterval is the wait after a connection that could not be
	// made (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL), ±50%.
	ConnectRetryInterval time.Duration
	// Headers are added to the stream's gRPC metadata (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers map[string]string

	UseTLS         bool   // CONFIG_GRPC_XDS_SERVER_USE_TLS
	ClientCertFile string // CONFIG_GRPC_XDS_CLIENT_TLS_CERT
	ClientKeyFile  string // CONFIG_GRPC_XDS_CLIENT_TLS_KEY
	ServerCAFile   string // CONFIG_GRPC_XDS_SERVER_TLS_CACERT, added to the system roots
	ServerSAN      string // CONFIG_GRPC_XDS_SERVER_TLS_SAN, the name to verify instead of the URL's host

	// Backoff after a stream that broke: BackoffInitial doubling up to
	// BackoffMax, each wait randomized by ±BackoffRandomFactor when
	// BackoffJitter is on (XDS_CLIENT_BACKOFF_*).
	BackoffInitial      time.Duration
	BackoffMax          time.Duration
	BackoffRandomFactor float64
	BackoffJitter       bool
	// MaxRecvMsgSize caps a response's size; 0 keeps gRPC's default (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES).
	MaxRecvMsgSize int
}

// DefaultSettings are the reference's defaults.
func DefaultSettings() Settings {
	return Settings{
		NodeID:               "default",
		ServerURL:            "localhost:18000",
		ConnectRetryInterval: 3 * time.Second,
		BackoffInitial:       10 * time.Second,
		BackoffMax:           60 * time.Second,
		BackoffRandomFactor:  0.5,
		BackoffJitter:        true,
	}
}

// Validate reports the first setting that cannot work.
func (s Settings) Validate() error {
	switch {
	case s.ServerURL == "":
		return errors.New("CONFIG_GRPC_XDS_SERVER_URL must not be empty")
	case s.ConnectRetryInterval <= 0:
		return fmt.Errorf("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL must be positive, got %v", s.ConnectRetryInterval)
	case s.BackoffInitial <= 0 || s.BackoffMax < s.BackoffInitial:
		return fmt.Errorf("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL (%v) must be positive and at most XDS_CLIENT_BACKOFF_MAX_INTERVAL (%v)", s.BackoffInitial, s.BackoffMax)
	case s.BackoffRandomFactor < 0 || s.BackoffRandomFactor > 1:
		return fmt.Errorf("XDS_CLIENT_BACKOFF_RANDOM_FACTOR must be between 0 and 1, got %v", s.BackoffRandomFactor)
	case s.MaxRecvMsgSize < 0:
		return fmt.Errorf("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES must not be negative, got %d", s.MaxRecvMsgSize)
	case (s.ClientCertFile == "") != (s.ClientKeyFile == ""):
		return errors.New("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together")
	case !s.UseTLS && (s.ClientCertFile != "" || s.ServerCAFile != "" || s.ServerSAN != ""):
		return errors.New("CONFIG_GRPC_XDS_CLIENT_TLS_*/SERVER_TLS_* need CONFIG_GRPC_XDS_SERVER_USE_TLS=true")
	}
	return nil
}

// ParseNodeMetadata reads CONFIG_GRPC_XDS_NODE_METADATA: "k1=v1,k2=v2", split
// on ',' then on the first '='. Blank items are skipped.
func ParseNodeMetadata(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	pairs, err := kvlist.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("CONFIG_GRPC_XDS_NODE_METADATA: %w", err)
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		out[p.Key] = p.Value // the last of a repeated key wins
	}
	return out, nil
}
