package metrics

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
)

// logSink prints statistics as the reference's gostats logging sink does,
// one JSON line per value:
//
//	{"level":"debug","ts":1795313464.123456,"logger":"gostats.loggingsink","msg":"flushing counter","json":{"name":"…","type":"counter","value":"1.000000"}}
//
// To stay readable in a terminal it prints only at a flush and only what
// changed: counters that moved, gauges whose value differs, timers that
// recorded something. A timer is one line per flush, its mean, with the
// number of samples in "samples" when there was more than one (the
// reference prints a line per sample, which floods a terminal under load).
type logSink struct {
	w     *bufio.Writer
	tags  string
	clock func() time.Time
}

func newLogSink(w io.Writer, tags map[string]string, clock func() time.Time) *logSink {
	return &logSink{w: bufio.NewWriter(w), tags: serializedTags(tags), clock: clock}
}

type logLine struct {
	Level  string            `json:"level"`
	TS     json.Number       `json:"ts"`
	Logger string            `json:"logger"`
	Msg    string            `json:"msg"`
	JSON   map[string]string `json:"json"`
}

func (s *logSink) send(batch []sample) {
	for _, m := range batch {
		switch m.kind {
		case kindCounter:
			s.line(m.name, "counter", float64(m.delta), 1)
		case kindGauge:
			if m.changed {
				s.line(m.name, "gauge", float64(m.gauge), 1)
			}
		case kindTimer:
			var sum float64
			for _, ms := range m.timings {
				sum += ms
			}
			s.line(m.name, "timer", sum/float64(len(m.timings)), len(m.timings))
		}
	}
	s.w.Flush() // a failed write to standard output has nowhere better to go
}

func (s *logSink) line(name, typ string, v float64, samples int) {
	now := s.clock()
	fields := map[string]string{"name": name + s.tags, "type": typ, "value": fmt.Sprintf("%f", v)}
	if samples > 1 {
		fields["samples"] = strconv.Itoa(samples)
	}
	b, err := json.Marshal(logLine{
		Level:  "debug",
		TS:     json.Number(fmt.Sprintf("%d.%06d", now.Unix(), now.Nanosecond()/1000)),
		Logger: "gostats.loggingsink",
		Msg:    "flushing " + typ,
		JSON:   fields,
	})
	if err != nil {
		return
	}
	s.w.Write(b)
	s.w.WriteByte('\n')
}

func (s *logSink) close() error { return s.w.Flush() }
