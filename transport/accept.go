package transport

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/sluicehq/sluice/internal/netx"
)

// guard wraps the gRPC, HTTP and debug listeners in netx's: accept
// failures waited out, connections capped. On error the listeners are
// closed.
func (n *listeners) guard(lns [3]net.Listener, log *slog.Logger) ([3]net.Listener, error) {
	l := n.opts
	grpcRefuse := netx.RefuseHTTP2
	if !n.plainGRPC {
		grpcRefuse = nil
	}
	cfgs := [3]netx.Config{
		{Max: l.MaxGRPCConns, Refuse: grpcRefuse, Name: "grpc", Log: log},
		{Max: l.MaxHTTPConns, Refuse: netx.RefuseHTTP, Name: "http", Log: log},
		{Max: l.MaxDebugConns, Refuse: netx.RefuseHTTP, Name: "debug", Log: log},
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
