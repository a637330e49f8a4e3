package transport

import (
	"fmt"
	"log/slog"
	"net"

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

func maxConnectionsFromEnv(e *Env) MaxConnections {
	return MaxConnections{
		GRPC:  e.Int("SLUICE_GRPC_MAX_CONNECTIONS", 0),
		HTTP:  e.Int("SLUICE_HTTP_MAX_CONNECTIONS", 0),
		Debug: e.Int("SLUICE_DEBUG_MAX_CONNECTIONS", 0),
	}
}

// resolved replaces 0 by the default and a negative cap by none (0).
func (m MaxConnections) resolved() MaxConnections {
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

// guard wraps the gRPC, HTTP and debug listeners in netx's: accept
// failures waited out, connections capped. On error the listeners are
// closed.
func (n *listeners) guard(lns [3]net.Listener, log *slog.Logger) ([3]net.Listener, error) {
	caps := n.settings.MaxConnections.resolved()
	grpcRefuse := netx.RefuseHTTP2
	if !n.plainGRPC {
		grpcRefuse = nil
	}
	cfgs := [3]netx.Config{
		{Max: caps.GRPC, Refuse: grpcRefuse, Name: "grpc", Log: log},
		{Max: caps.HTTP, Refuse: netx.RefuseHTTP, Name: "http", Log: log},
		{Max: caps.Debug, Refuse: netx.RefuseHTTP, Name: "debug", Log: log},
	}
	var out [3]net.Listener
	for i, ln := range lns {
		g, err := netx.Listen(ln, cfgs[i])
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			return out, fmt.Errorf("listening: %w", err)
		}
		out[i] = g
	}
	return out, nil
}
