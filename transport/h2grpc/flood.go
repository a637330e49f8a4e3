package h2grpc

import (
	"time"

	"golang.org/x/net/http2"
)

// FloodLimits bound the frames a peer can make the server answer without
// any call: each PING and SETTINGS costs an acknowledgement written back,
// and a peer that sends them in a loop would cost CPU for as long as it
// keeps the connection. Each kind has a budget of a burst of frames that
// grows back by one per Interval; a peer that spends it gets GOAWAY
// ENHANCE_YOUR_CALM, as grpc-go answers too many pings.
//
// A PING that comes after an answer or DATA was queued since the previous PING
// costs nothing: grpc-go's and C-core's clients send one with the calls
// that follow answers (flow-control estimates), and a keepalive ping
// comes seconds apart; neither ever spends the budget.
type FloodLimits struct {
	// PingBurst is how many PINGs may come with no answer between them
	// faster than one per Interval (default 10).
	PingBurst int
	// SettingsBurst is the same for SETTINGS (default 100: grpc-go's
	// client sends one each time it widens its flow-control window).
	SettingsBurst int
	// Interval is how fast a budget grows back (default 1 s).
	Interval time.Duration
}

func (f *FloodLimits) ensureDefaults() {
	if f.PingBurst == 0 {
		f.PingBurst = 10
	}
	if f.SettingsBurst == 0 {
		f.SettingsBurst = 100
	}
	if f.Interval == 0 {
		f.Interval = time.Second
	}
}

// floodGuard is a connection's flood budgets; reader-owned.
type floodGuard struct {
	pings, settings budget
	// answersAtPing is conn.answers when the last PING came.
	answersAtPing uint64
}

// budget is a token bucket kept as the time its tokens are all back
// (GCRA): one frame costs one interval.
type budget struct{ full time.Time }

// take spends a frame's share; false once more than burst frames came
// faster than one per interval.
func (b *budget) take(now time.Time, interval time.Duration, burst int) bool {
	if b.full.Before(now) {
		b.full = now
	}
	b.full = b.full.Add(interval)
	return b.full.Sub(now) <= time.Duration(burst)*interval
}

// onPing queues the acknowledgement of a PING, or fails when the peer
// spent its budget.
func (c *conn) onPing(data [8]byte) error {
	l := &c.s.o.Floods
	c.mu.Lock()
	free := c.answers != c.flood.answersAtPing
	c.flood.answersAtPing = c.answers
	if !free && !c.flood.pings.take(time.Now(), l.Interval, l.PingBurst) {
		c.mu.Unlock()
		return connError{http2.ErrCodeEnhanceYourCalm, "too_many_pings"}
	}
	// Written at the end of this read, or with the answers of the calls
	// read with it (see endOfRead).
	c.out = appendPing(c.out, data)
	c.mu.Unlock()
	c.ackOwed = true
	return nil
}

// settingsAllowed spends a SETTINGS frame's share of its budget.
func (c *conn) settingsAllowed() error {
	if l := &c.s.o.Floods; !c.flood.settings.take(time.Now(), l.Interval, l.SettingsBurst) {
		return connError{http2.ErrCodeEnhanceYourCalm, "too many SETTINGS"}
	}
	return nil
}
