package alloc

import "fmt"

// DebugAsks is what the last Decide asked for each live reporter, for the
// world test's trace.
func (p *Planner) DebugAsks() string {
	s := ""
	for _, a := range p.asks {
		s += fmt.Sprintf(" ask r%d share=%.1f target=%+v send=%v replace=%v\n", a.r, a.share, a.target, a.send, a.replace)
	}
	return s
}
