// Package kvlist reads the "k1=v1,k2=v2" lists of the environment
// (OTEL_EXPORTER_OTLP_HEADERS, CONFIG_GRPC_XDS_NODE_METADATA): split on ','
// then on the first '=', keys and values trimmed, blank items skipped. What a
// value means (the OTLP headers are URL-encoded) is the caller's business.
package kvlist

import (
	"fmt"
	"strings"
)

// Pair is one key=value item.
type Pair struct{ Key, Value string }

// Parse returns the items in their order (a repeated key is the caller's to
// resolve; the readers so far let the last one win). An item without '=' or
// with an empty key is an error naming the item.
func Parse(s string) ([]Pair, error) {
	var out []Pair
	for _, item := range strings.Split(s, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", item)
		}
		out = append(out, Pair{Key: k, Value: strings.TrimSpace(v)})
	}
	return out, nil
}
