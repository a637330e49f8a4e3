package memcache

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is a tiny authoritative DNS server on loopback UDP that answers
// SRV queries for one name, so SRV discovery runs through Go's real
// resolver and wire format.
type dnsServer struct {
	conn    net.PacketConn
	name    string // fully qualified, with the trailing dot
	mu      sync.Mutex
	targets []string // "host:port"
	done    chan struct{}
}

func startDNS(t *testing.T, name string, targets ...string) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{conn: pc, name: strings.TrimSuffix(name, ".") + ".", targets: targets, done: make(chan struct{})}
	go s.serve()
	t.Cleanup(func() {
		pc.Close()
		<-s.done
	})
	return s
}

func (s *dnsServer) set(targets ...string) {
	s.mu.Lock()
	s.targets = targets
	s.mu.Unlock()
}

// resolver sends every query to this server.
func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.conn.LocalAddr().String())
	}}
}

func (s *dnsServer) serve() {
	defer close(s.done)
	buf := make([]byte, 1500)
	for {
		n, addr, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp, ok := s.answer(buf[:n]); ok {
			_, _ = s.conn.WriteTo(resp, addr)
		}
	}
}

func (s *dnsServer) answer(req []byte) ([]byte, bool) {
	var m dnsmessage.Message
	if err := m.Unpack(req); err != nil || len(m.Questions) != 1 {
		return nil, false
	}
	q := m.Questions[0]
	resp := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: m.Header.ID, Response: true, Authoritative: true, RecursionDesired: m.Header.RecursionDesired},
		Questions: m.Questions,
	}
	switch {
	case !strings.EqualFold(q.Name.String(), s.name):
		resp.Header.RCode = dnsmessage.RCodeNameError
	case q.Type == dnsmessage.TypeSRV:
		s.mu.Lock()
		for _, hp := range s.targets {
			host, port, _ := net.SplitHostPort(hp)
			var p uint16
			for _, c := range port {
				p = p*10 + uint16(c-'0')
			}
			resp.Answers = append(resp.Answers, dnsmessage.Resource{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeSRV, Class: dnsmessage.ClassINET, TTL: 1},
				Body:   &dnsmessage.SRVResource{Priority: 10, Weight: 10, Port: p, Target: dnsmessage.MustNewName(host + ".")},
			})
		}
		s.mu.Unlock()
	}
	out, err := resp.Pack()
	return out, err == nil
}
