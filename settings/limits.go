package settings

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/netx"
)

// MaxConnections caps the connections open at once on the gRPC, /json and
// debug ports (SLUICE_GRPC_MAX_CONNECTIONS, SLUICE_HTTP_MAX_CONNECTIONS,
// SLUICE_DEBUG_MAX_CONNECTIONS). A connection beyond a cap is refused
// politely: an HTTP/1.1 port answers 503 with Retry-After, the gRPC port
// an HTTP/2 GOAWAY (ENHANCE_YOUR_CALM; closed without a word under TLS),
// and it is closed. 0 takes a share of the process's open-file limit
// (DefaultMaxConnections), negative sets no cap: every value is valid.
//
// Whatever the caps, every port waits out a failed accept (EMFILE: out of
// file descriptors) 5 ms to 1 s, as net/http does, instead of stopping the
// server and with it the process.
type MaxConnections struct{ GRPC, HTTP, Debug int }

// The shares of the open-file limit the caps take by default, in percent:
// with the OData port's 40 (odata.ODataFileShare) they leave 15 % to
// files, backends and the store.
const (
	grpcFileShare  = 30
	httpFileShare  = 10
	debugFileShare = 5
)

// DefaultMaxConnections are the caps 0 stands for, from the process's
// open-file limit (all 0, no cap, when it is unknown).
func DefaultMaxConnections() MaxConnections {
	return MaxConnections{
		GRPC:  netx.ShareOfFiles(grpcFileShare),
		HTTP:  netx.ShareOfFiles(httpFileShare),
		Debug: netx.ShareOfFiles(debugFileShare),
	}
}

func maxConnectionsFromEnv(e *env) MaxConnections {
	return MaxConnections{
		GRPC:  e.Int("SLUICE_GRPC_MAX_CONNECTIONS", 0),
		HTTP:  e.Int("SLUICE_HTTP_MAX_CONNECTIONS", 0),
		Debug: e.Int("SLUICE_DEBUG_MAX_CONNECTIONS", 0),
	}
}

// Resolved replaces 0 by the default and a negative cap by none (0).
func (m MaxConnections) Resolved() MaxConnections {
	d := DefaultMaxConnections()
	pick := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return MaxConnections{GRPC: pick(m.GRPC, d.GRPC), HTTP: pick(m.HTTP, d.HTTP), Debug: pick(m.Debug, d.Debug)}
}

// GRPCLimits bound what one client may hold of the gRPC port, with either
// server (SLUICE_GRPC_SERVER): the same limits, the same answers.
type GRPCLimits struct {
	// MaxConcurrentStreams is the calls one connection may have open
	// (SLUICE_GRPC_MAX_CONCURRENT_STREAMS); more are refused.
	MaxConcurrentStreams int
	// IdleTimeout closes a connection that has had no call for this long
	// (SLUICE_GRPC_IDLE_TIMEOUT; GOAWAY first, so clients reconnect
	// quietly).
	IdleTimeout time.Duration
	// StallTimeout answers DEADLINE_EXCEEDED a call whose request message
	// has not come this long after its headers; for a streaming call, its
	// first message (SLUICE_GRPC_STALL_TIMEOUT).
	StallTimeout time.Duration
}

// DefaultGRPCLimits: the native server's stream limit; a gateway's
// connection idle for five minutes is rare and cheap to open again; a
// request message comes with its headers, in the same write, unless the
// client is stuck or hostile.
func DefaultGRPCLimits() GRPCLimits {
	return GRPCLimits{MaxConcurrentStreams: 1024, IdleTimeout: 5 * time.Minute, StallTimeout: 30 * time.Second}
}

// Validate reports a limit that would turn itself off.
func (l GRPCLimits) Validate() error {
	var errs []error
	if l.MaxConcurrentStreams < 1 || l.MaxConcurrentStreams > math.MaxInt32/2 {
		errs = append(errs, fmt.Errorf("SLUICE_GRPC_MAX_CONCURRENT_STREAMS (%d) must be between 1 and %d", l.MaxConcurrentStreams, math.MaxInt32/2))
	}
	if l.IdleTimeout <= 0 || l.StallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("SLUICE_GRPC_IDLE_TIMEOUT (%v) and SLUICE_GRPC_STALL_TIMEOUT (%v) must be positive", l.IdleTimeout, l.StallTimeout))
	}
	return errors.Join(errs...)
}

// ParseLevel reads LOG_LEVEL the way the reference does (logrus names).
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "trace", "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning", "":
		return slog.LevelWarn, nil
	case "error", "fatal", "panic":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("LOG_LEVEL %q is not a level (debug, info, warn, error)", s)
}
