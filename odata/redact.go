package odata

import (
	"bytes"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"
)

// Logs never hold a secret. Keys belong in the x-api-key header, but
// clients put them in query strings too (?api_key=…, ?token=…), and a
// request line is logged whole; so the values of parameters whose names
// say secret are masked before any log line is written. OData's own
// options ($skiptoken and the rest) are never secrets.

// secretWords mark a parameter name (or a path segment) as holding a
// secret: in query parameters separated by & or ;, in a path segment's
// ;name=value parameters and name=value segments, and in the segment after
// one so named (/token/SECRET).
var secretWords = []string{"key", "token", "secret", "password", "passwd", "pwd", "auth", "signature", "sig",
	"credential", "session", "jwt", "code", "bearer", "cookie", "otp", "nonce"}

func secretParam(name string) bool {
	if strings.HasPrefix(name, "$") {
		return false
	}
	name = strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// maskedMark replaces a secret value.
const maskedMark = "xxxxx"

// appendMaskedURI appends a request URI with the values of secret
// parameters, and values that look like a JSON Web Token whatever their
// name, replaced by maskedMark.
func appendMaskedURI(b, uri []byte) []byte {
	path, query, found := bytes.Cut(uri, []byte{'?'})
	b = appendMaskedPath(b, path)
	if !found {
		return b
	}
	b = append(b, '?')
	start := 0
	for i := 0; i <= len(query); i++ {
		if i < len(query) && query[i] != '&' && query[i] != ';' {
			continue
		}
		b = appendMaskedPair(b, query[start:i])
		if i < len(query) {
			b = append(b, query[i])
		}
		start = i + 1
	}
	return b
}

// appendMaskedPair appends one name=value pair, its value masked when the
// name says secret or the value is a token.
func appendMaskedPair(b, part []byte) []byte {
	rawName, value, hasValue := bytes.Cut(part, []byte{'='})
	if !hasValue {
		return append(b, part...)
	}
	name, err := url.QueryUnescape(string(rawName))
	if err != nil {
		name = string(rawName)
	}
	if secretParam(name) || looksLikeJWT(value) {
		b = append(b, rawName...)
		b = append(b, '=')
		return append(b, maskedMark...)
	}
	return append(b, part...)
}

// appendMaskedPath masks the secrets of a path: ;name=value parameters
// and name=value segments with secret names, JWT-like segments, and the
// segment after one named by a secret word alone (/api_key/SECRET).
func appendMaskedPath(b, path []byte) []byte {
	after := false // the previous segment named a secret
	for i, seg := range bytes.Split(path, []byte{'/'}) {
		if i > 0 {
			b = append(b, '/')
		}
		if after && len(seg) > 0 {
			b = append(b, maskedMark...)
			after = false
			continue
		}
		for j, p := range bytes.Split(seg, []byte{';'}) {
			if j > 0 {
				b = append(b, ';')
			}
			if j == 0 && !bytes.Contains(p, []byte{'='}) {
				if looksLikeJWT(p) {
					b = append(b, maskedMark...)
					continue
				}
				after = len(p) > 0 && secretParam(string(p)) && !bytes.ContainsAny(p, "('")
				b = append(b, p...)
				continue
			}
			b = appendMaskedPair(b, p)
		}
	}
	return b
}

// looksLikeJWT says whether v is three base64url parts with a JSON header
// ("eyJ" is base64 for `{"`).
func looksLikeJWT(v []byte) bool {
	return bytes.HasPrefix(v, []byte("eyJ")) && bytes.Count(v, []byte{'.'}) == 2 && len(v) >= 20
}

// loggedURI is the request URI as logs show it: masked, and cut to
// maxLoggedPath.
func loggedURI(ctx *fasthttp.RequestCtx) string {
	uri := appendMaskedURI(nil, ctx.RequestURI())
	if len(uri) > maxLoggedPath {
		uri = append(uri[:maxLoggedPath:maxLoggedPath], "..."...)
	}
	return string(uri)
}
