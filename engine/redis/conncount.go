package redis

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	goredis "github.com/redis/go-redis/v9"
)

// connCounter is a go-redis hook that counts live connections: the health
// signal of HealthCheckActiveConnection and the cx_* pool metrics.
type connCounter struct {
	live, dials, closes atomic.Int64
}

var _ goredis.Hook = (*connCounter)(nil)

func (c *connCounter) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c.live.Add(1)
		c.dials.Add(1)
		// go-redis checks idle connections for EOF through syscall.Conn; a
		// wrapper without it would hide dead connections from that check.
		if sc, ok := conn.(syscall.Conn); ok {
			return &countedSysConn{countedConn: countedConn{Conn: conn, c: c}, sc: sc}, nil
		}
		return &countedConn{Conn: conn, c: c}, nil
	}
}

func (c *connCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (c *connCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

type countedConn struct {
	net.Conn
	c    *connCounter
	once sync.Once
}

func (cc *countedConn) Close() error {
	cc.once.Do(func() {
		cc.c.live.Add(-1)
		cc.c.closes.Add(1)
	})
	return cc.Conn.Close()
}

type countedSysConn struct {
	countedConn
	sc syscall.Conn
}

func (cc *countedSysConn) SyscallConn() (syscall.RawConn, error) { return cc.sc.SyscallConn() }
