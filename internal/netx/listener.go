package netx

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config says how a Listener bounds its connections.
type Config struct {
	// Max is the most connections open at once; one accepted beyond it is
	// refused. 0 means no cap.
	Max int
	// Refuse writes a short answer to a refused connection before it is
	// closed (RefuseHTTP, RefuseHTTP2); nil closes it without a word.
	Refuse func(net.Conn)
	// Name is the listener's name in log lines ("odata", "grpc").
	Name string
	// Log receives a line when accepting starts failing and one when a
	// connection is refused, each at most once a minute; nil logs nothing.
	Log *slog.Logger
}

// Validate reports a setting that cannot work.
func (c Config) Validate() error {
	if c.Max < 0 {
		return fmt.Errorf("netx: %s: the connection cap (%d) is negative", c.Name, c.Max)
	}
	return nil
}

// The waits between failed accepts: net/http's.
const (
	minDelay = 5 * time.Millisecond
	maxDelay = time.Second
)

// maxRefusing bounds the refusals being written at once; a connection
// beyond it is closed without an answer.
const maxRefusing = 64

// refuseTime bounds how long a refused connection is held to answer it.
const refuseTime = 250 * time.Millisecond

// Listener is a net.Listener whose Accept survives running out of file
// descriptors and refuses connections beyond its cap.
type Listener struct {
	net.Listener
	cfg Config

	open     atomic.Int64 // connections accepted and not yet closed
	refusing atomic.Int64 // refusals being written
	refused  atomic.Uint64
	retried  atomic.Uint64

	closeOnce sync.Once
	done      chan struct{}
	lastLog   atomic.Int64 // unix nanoseconds of the last refusal logged
	lastFail  atomic.Int64 // and of the last accept failure logged
}

// Listen wraps ln; cfg must be valid.
func Listen(ln net.Listener, cfg Config) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Listener{Listener: ln, cfg: cfg, done: make(chan struct{})}, nil
}

// Accept returns the next connection under the cap. An error the process
// recovers from (out of file descriptors, out of buffers, a connection
// aborted before it was accepted) is waited out, 5 ms at first and twice
// as long each time up to a second; any other error, a closed listener
// included, is returned.
func (l *Listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !Retryable(err) {
				return nil, err
			}
			l.retried.Add(1)
			if now := time.Now().UnixNano(); delay == 0 && l.cfg.Log != nil && now-l.lastFail.Load() > int64(time.Minute) {
				l.lastFail.Store(now)
				l.cfg.Log.Warn("accept failed; retrying", "listener", l.cfg.Name, "error", err)
			}
			delay = min(max(2*delay, minDelay), maxDelay)
			select {
			case <-time.After(delay):
			case <-l.done:
				return nil, fmt.Errorf("netx: accept: %w", net.ErrClosed)
			}
			continue
		}
		delay = 0
		if l.cfg.Max > 0 && l.open.Load() >= int64(l.cfg.Max) {
			l.refuse(c)
			continue
		}
		l.open.Add(1)
		return &conn{Conn: c, l: l}, nil
	}
}

// Close stops Accept, also one waiting out a failure.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Open is how many accepted connections are still open.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Refused is how many connections were refused for the cap.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Retried is how many accepts failed and were retried.
func (l *Listener) Retried() uint64 { return l.retried.Load() }

// refuse answers c with cfg.Refuse, in a goroutine of its own so that the
// accept loop goes on, and closes it.
func (l *Listener) refuse(c net.Conn) {
	l.refused.Add(1)
	if now := time.Now().UnixNano(); l.cfg.Log != nil && now-l.lastLog.Load() > int64(time.Minute) {
		l.lastLog.Store(now)
		l.cfg.Log.Warn("connection cap reached; refusing connections", "listener", l.cfg.Name, "max", l.cfg.Max)
	}
	if l.cfg.Refuse == nil || l.refusing.Add(1) > maxRefusing {
		if l.cfg.Refuse != nil {
			l.refusing.Add(-1)
		}
		_ = c.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseTime))
		l.cfg.Refuse(c)
		// Closing with the client's request unread would reset the
		// connection, and the client could lose the answer: shut the
		// write side and read what the client sent until it closes.
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
			var buf [512]byte
			for {
				if _, err := c.Read(buf[:]); err != nil {
					return
				}
			}
		}
	}()
}

// Retryable says whether an accept error is one the process recovers from.
func Retryable(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// conn counts itself out of its listener's open connections once closed.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// SyscallConn is the underlying connection's, for the servers that watch
// the socket (an error when it has none).
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("netx: the connection has no file descriptor")
}

// CloseWrite shuts the write side where the connection has one.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("netx: the connection cannot close its write side")
}
