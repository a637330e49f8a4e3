package redact

import "regexp"

// Mask replaces a secret.
const Mask = "xxxxx"

var (
	// scheme://user:password@ — the password is everything up to the last
	// '@' before the host, as a URL parser reads it.
	userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)([^\s/]*)@`)
	// password=value in a keyword/value DSN ('quoted' or up to a space) or a
	// URL query (up to '&'); also sslpassword and the like.
	keyword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'][^\s&]*)`)
)

// String returns s with every password it carries replaced by Mask.
func String(s string) string {
	s = userinfo.ReplaceAllString(s, "${1}"+Mask+"@")
	return keyword.ReplaceAllString(s, "${1}"+Mask)
}

// Args is String of each argument, in a new slice.
func Args(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = String(a)
	}
	return out
}
