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

// secretWords mark a parameter name as holding a secret.
var secretWords = []string{"key", "token", "secret", "password", "passwd", "pwd", "auth", "signature", "sig", "credential", "session"}

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
// parameters replaced by maskedMark.
func appendMaskedURI(b, uri []byte) []byte {
	path, query, found := bytes.Cut(uri, []byte{'?'})
	b = append(b, path...)
	if !found {
		return b
	}
	b = append(b, '?')
	for i, part := range bytes.Split(query, []byte{'&'}) {
		if i > 0 {
			b = append(b, '&')
		}
		rawName, _, hasValue := bytes.Cut(part, []byte{'='})
		name, err := url.QueryUnescape(string(rawName))
		if err != nil {
			name = string(rawName)
		}
		if hasValue && secretParam(name) {
			b = append(b, rawName...)
			b = append(b, '=')
			b = append(b, maskedMark...)
			continue
		}
		b = append(b, part...)
	}
	return b
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
