package transport

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/engine"
)

// The reference decoding the hand-written decoder is tested against.

// toEngineRequest copies the wire request into the engine's model. Envoy's
// unit numbers equal engine.Unit's, so units convert by value.
func toEngineRequest(r *rlsv3.RateLimitRequest) *engine.Request {
	out := &engine.Request{
		Domain:      r.GetDomain(),
		HitsAddend:  r.GetHitsAddend(),
		Descriptors: make([]engine.Descriptor, len(r.GetDescriptors())),
	}
	for i, d := range r.GetDescriptors() {
		ed := &out.Descriptors[i]
		if n := len(d.GetEntries()); n > 0 {
			ed.Entries = make([]engine.Entry, n)
			for j, e := range d.GetEntries() {
				ed.Entries[j] = engine.Entry{Key: e.GetKey(), Value: e.GetValue()}
			}
		}
		if l := d.GetLimit(); l != nil {
			ed.Limit = &engine.LimitOverride{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: engine.Unit(l.GetUnit())}
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			ed.HitsAddend = &v
		}
	}
	return out
}
