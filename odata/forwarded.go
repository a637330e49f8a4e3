package odata

import (
	"net/netip"
	"strings"

	"github.com/valyala/fasthttp"
)

// Forwarding headers are believed only from a peer in TrustedProxies:
// anyone can send them, and believed from anyone they would let a client
// choose the scheme and host of the links given to others (a cache in
// front would keep them) and the address its per-address limits count it
// by.

// trusted reports whether the request's direct peer is a trusted proxy.
func (s *Server) trusted(ctx *fasthttp.RequestCtx) bool {
	if len(s.opts.TrustedProxies) == 0 {
		return false
	}
	return s.isTrusted(peerAddr(ctx))
}

func (s *Server) isTrusted(a netip.Addr) bool {
	for _, p := range s.opts.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func peerAddr(ctx *fasthttp.RequestCtx) netip.Addr {
	a, _ := netip.AddrFromSlice(ctx.RemoteIP())
	return a.Unmap()
}

// clientAddr is the address per-address state counts a request by: its
// peer's, or behind trusted proxies the right-most address of the
// forwarding chain of Options.ForwardedHeader that is not a trusted proxy itself (the left-most one
// when all are), since every hop appends and only the trusted ones can be
// believed not to have been written by the client.
func (s *Server) clientAddr(ctx *fasthttp.RequestCtx) string {
	peer := peerAddr(ctx)
	if len(s.opts.TrustedProxies) == 0 || !s.isTrusted(peer) {
		return peer.String()
	}
	chain := s.forwardedFor(ctx)
	for i := len(chain) - 1; i >= 0; i-- {
		if !s.isTrusted(chain[i]) || i == 0 {
			return chain[i].String()
		}
	}
	return peer.String()
}

// forwardedFor is the client chain of the header the operator names
// (Options.ForwardedHeader), oldest first: Forwarded's for= (RFC 7239)
// when that is the one, else a comma-separated list of addresses as
// X-Forwarded-For. The other headers are ignored: a proxy appends to one
// of them and passes the client's own copies of the others through, so
// preferring any other would let the client choose its address. An
// entry that is not an address (a "unknown" or an obfuscated name) ends
// the chain there: the hops before it cannot be located.
func (s *Server) forwardedFor(ctx *fasthttp.RequestCtx) []netip.Addr {
	var chain []netip.Addr
	name := s.opts.forwardedHeader()
	if strings.EqualFold(name, "Forwarded") {
		for _, h := range ctx.Request.Header.PeekAll("Forwarded") {
			for _, el := range forwardedElements(string(h)) {
				a, ok := parseNodeAddr(el["for"])
				if !ok {
					chain = chain[:0]
					continue
				}
				chain = append(chain, a)
			}
		}
		return chain
	}
	for _, h := range ctx.Request.Header.PeekAll(name) {
		for _, part := range strings.Split(string(h), ",") {
			a, ok := parseNodeAddr(strings.TrimSpace(part))
			if !ok {
				chain = chain[:0]
				continue
			}
			chain = append(chain, a)
		}
	}
	return chain
}

// forwardedView is the scheme and host the client used, as the first
// trusted proxy saw them ("" where not said): Forwarded's proto= and
// host= when Options.ForwardedHeader is Forwarded, else
// X-Forwarded-Proto and X-Forwarded-Host.
func (s *Server) forwardedView(ctx *fasthttp.RequestCtx) (scheme, host string) {
	if !s.trusted(ctx) {
		return "", ""
	}
	if !strings.EqualFold(s.opts.forwardedHeader(), "Forwarded") {
		scheme = firstValue(ctx.Request.Header.Peek("X-Forwarded-Proto"))
		host = firstValue(ctx.Request.Header.Peek("X-Forwarded-Host"))
	} else if f := ctx.Request.Header.Peek("Forwarded"); len(f) > 0 {
		if els := forwardedElements(string(f)); len(els) > 0 {
			scheme, host = els[0]["proto"], els[0]["host"]
		}
	}
	scheme = strings.ToLower(scheme)
	if scheme != "http" && scheme != "https" {
		scheme = ""
	}
	if !validHost(host) {
		host = ""
	}
	return scheme, host
}

func firstValue(h []byte) string {
	v, _, _ := strings.Cut(string(h), ",")
	return strings.TrimSpace(v)
}

// validHost accepts host[:port] with the characters of a registered name,
// an IPv4 address or a bracketed IPv6 address: the value goes into links.
func validHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-.:[]_", c) >= 0) {
			return false
		}
	}
	return true
}

// forwardedElements splits a Forwarded header into its elements, each a
// map of lower-cased parameter names to unquoted values. A malformed pair
// is skipped, not fatal: the header is advisory.
func forwardedElements(h string) []map[string]string {
	var out []map[string]string
	el := map[string]string{}
	i := 0
	for i <= len(h) {
		// One pair: token "=" (token | quoted-string).
		for i < len(h) && (h[i] == ' ' || h[i] == '\t') {
			i++
		}
		start := i
		for i < len(h) && h[i] != '=' && h[i] != ';' && h[i] != ',' {
			i++
		}
		name := strings.ToLower(strings.TrimSpace(h[start:i]))
		var val string
		if i < len(h) && h[i] == '=' {
			i++
			if i < len(h) && h[i] == '"' {
				var b strings.Builder
				for i++; i < len(h) && h[i] != '"'; i++ {
					if h[i] == '\\' && i+1 < len(h) {
						i++
					}
					b.WriteByte(h[i])
				}
				i++ // the closing quote
				val = b.String()
			} else {
				start = i
				for i < len(h) && h[i] != ';' && h[i] != ',' {
					i++
				}
				val = strings.TrimSpace(h[start:i])
			}
			if name != "" {
				el[name] = val
			}
		}
		for i < len(h) && h[i] != ';' && h[i] != ',' {
			i++ // junk after a value
		}
		if i >= len(h) || h[i] == ',' {
			if len(el) > 0 {
				out = append(out, el)
				el = map[string]string{}
			}
		}
		i++
	}
	return out
}

// parseNodeAddr reads an address of X-Forwarded-For or Forwarded's for=:
// "192.0.2.1", "192.0.2.1:4711", "[2001:db8::1]:4711" or "2001:db8::1".
func parseNodeAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end > 0 {
			if a, err := netip.ParseAddr(s[1:end]); err == nil {
				return a.Unmap(), true
			}
		}
	}
	return netip.Addr{}, false
}
