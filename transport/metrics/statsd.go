package metrics

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	dialTimeout  = time.Second
	writeTimeout = 2 * time.Second
)

// statsdSink writes plain statsd lines over TCP, as the reference's gostats
// TCP sink: "name:1|c", "name:5|g", "name:0.42|ms", tags folded into the
// name as ".__k=v". A connection that cannot be made or written drops that
// flush; the next flush dials again.
type statsdSink struct {
	addr string
	tags string
	log  *slog.Logger

	conn net.Conn
	down bool // the last attempt failed; logged once per outage
	buf  bytes.Buffer
}

func newStatsdSink(addr string, tags map[string]string, log *slog.Logger) *statsdSink {
	return &statsdSink{addr: addr, tags: serializedTags(tags), log: log}
}

func (s *statsdSink) send(batch []sample) {
	s.buf.Reset()
	for _, m := range batch {
		name := m.name + s.tags
		switch m.kind {
		case kindCounter:
			appendLine(&s.buf, name, strconv.AppendUint(nil, m.delta, 10), "|c")
		case kindGauge:
			// A leading '-' would make statsd read the value as a decrement.
			appendLine(&s.buf, name, strconv.AppendInt(nil, max(m.gauge, 0), 10), "|g")
		case kindTimer:
			for _, ms := range m.timings {
				appendLine(&s.buf, name, strconv.AppendFloat(nil, ms, 'f', -1, 64), "|ms")
			}
		}
	}
	s.write(s.buf.Bytes())
}

func appendLine(b *bytes.Buffer, name string, value []byte, suffix string) {
	b.WriteString(name)
	b.WriteByte(':')
	b.Write(value)
	b.WriteString(suffix)
	b.WriteByte('\n')
}

// write sends p on the connection, redialing once if the connection turns
// out to be dead.
func (s *statsdSink) write(p []byte) {
	if len(p) == 0 {
		return
	}
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if s.conn != nil && !alive(s.conn) {
			s.conn.Close()
			s.conn = nil
		}
		if s.conn == nil {
			if s.conn, err = net.DialTimeout("tcp", s.addr, dialTimeout); err != nil {
				s.conn = nil
				break
			}
		}
		s.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err = s.conn.Write(p); err == nil {
			if s.down {
				s.log.Info("statsd sink reconnected", "addr", s.addr)
				s.down = false
			}
			return
		}
		s.conn.Close()
		s.conn = nil
	}
	if !s.down {
		s.log.Warn("statsd sink: dropping statistics until the server is back", "addr", s.addr, "error", err)
		s.down = true
	}
}

// alive reports whether the peer still has the connection open. A statsd
// server never writes, so a readable end of stream or a reset means it went
// away; checking first keeps a restarted server from silently swallowing a
// whole flush into a dead socket. The peek neither blocks nor consumes.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := true
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case rerr == unix.EAGAIN || rerr == unix.EINTR:
		case rerr != nil || n == 0:
			open = false
		}
		return true // never wait for readiness
	})
	return err == nil && open
}

func (s *statsdSink) close() error {
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn = nil
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
