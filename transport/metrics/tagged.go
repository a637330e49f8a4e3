package metrics

import (
	"bytes"
	"log/slog"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// maxDatagram keeps a tagged statsd packet inside one Ethernet frame, as
// DogStatsD clients do.
const maxDatagram = 1432

// taggedSink writes DogStatsD lines ("name:1|c|#k:v,k2:v2") over UDP. A name
// is first rewritten by the first mogrifier whose pattern matches it.
type taggedSink struct {
	addr       string
	extra      []string // "k:v", sorted by key
	mogrifiers []mogrifier
	log        *slog.Logger

	conn   net.Conn
	failed bool // the last send failed; logged once per outage
	packet bytes.Buffer
	line   bytes.Buffer
}

type mogrifier struct {
	re   *regexp.Regexp
	name string
	tags [][2]string // key, value template; sorted by key
}

func newTaggedSink(addr string, extra map[string]string, ms []Mogrifier, log *slog.Logger) (*taggedSink, error) {
	s := &taggedSink{addr: addr, log: log}
	for _, t := range sortedTags(extra) {
		s.extra = append(s.extra, t[0]+":"+t[1])
	}
	for _, m := range ms {
		re, err := m.compile()
		if err != nil {
			return nil, err
		}
		mg := mogrifier{re: re, name: m.NewName}
		for k, v := range m.Tags {
			mg.tags = append(mg.tags, [2]string{k, v})
		}
		sort.Slice(mg.tags, func(i, j int) bool { return mg.tags[i][0] < mg.tags[j][0] })
		s.mogrifiers = append(s.mogrifiers, mg)
	}
	return s, nil
}

// mogrify returns the name to send and the tags the matching mogrifier adds.
func (s *taggedSink) mogrify(name string) (string, []string) {
	for _, m := range s.mogrifiers {
		groups := m.re.FindStringSubmatch(name)
		if groups == nil {
			continue
		}
		out := name
		if m.name != "" {
			out = expand(m.name, groups)
		}
		tags := make([]string, 0, len(m.tags))
		for _, t := range m.tags {
			tags = append(tags, t[0]+":"+cleanDogTag(expand(t[1], groups)))
		}
		return out, tags
	}
	return name, nil
}

// expand replaces $1, $2, ... with the capture groups, highest index first so
// that $12 is not read as $1 followed by "2".
func expand(tmpl string, groups []string) string {
	for i := len(groups) - 1; i >= 1; i-- {
		tmpl = strings.ReplaceAll(tmpl, "$"+strconv.Itoa(i), groups[i])
	}
	return tmpl
}

var dogTagCleaner = strings.NewReplacer(",", "_", "|", "_", "\n", "_")

// cleanDogTag keeps a captured value from breaking the line's tag list.
func cleanDogTag(v string) string { return dogTagCleaner.Replace(v) }

func (s *taggedSink) send(batch []sample) {
	s.packet.Reset()
	for _, m := range batch {
		name, tags := s.mogrify(m.name)
		tags = append(tags, s.extra...)
		switch m.kind {
		case kindCounter:
			s.add(name, strconv.AppendUint(nil, m.delta, 10), "|c", tags)
		case kindGauge:
			s.add(name, strconv.AppendInt(nil, m.gauge, 10), "|g", tags)
		case kindTimer:
			for _, ms := range m.timings {
				s.add(name, strconv.AppendFloat(nil, ms, 'f', -1, 64), "|ms", tags)
			}
		}
	}
	s.flushPacket()
}

// add appends one line to the packet, sending the packet first when the line
// would not fit.
func (s *taggedSink) add(name string, value []byte, typ string, tags []string) {
	s.line.Reset()
	s.line.WriteString(name)
	s.line.WriteByte(':')
	s.line.Write(value)
	s.line.WriteString(typ)
	if len(tags) > 0 {
		s.line.WriteString("|#")
		s.line.WriteString(strings.Join(tags, ","))
	}
	if s.packet.Len() > 0 && s.packet.Len()+1+s.line.Len() > maxDatagram {
		s.flushPacket()
	}
	if s.packet.Len() > 0 {
		s.packet.WriteByte('\n')
	}
	s.packet.Write(s.line.Bytes())
}

func (s *taggedSink) flushPacket() {
	if s.packet.Len() == 0 {
		return
	}
	defer s.packet.Reset()
	var err error
	if s.conn == nil {
		// Dialing UDP sends nothing; it resolves the name and picks a route.
		if s.conn, err = net.DialTimeout("udp", s.addr, dialTimeout); err != nil {
			s.conn = nil
		}
	}
	if s.conn != nil {
		if _, err = s.conn.Write(s.packet.Bytes()); err == nil {
			s.failed = false
			return
		}
	}
	// UDP reports an absent listener on a later write (ICMP); keep the socket,
	// drop the packet.
	if !s.failed {
		s.log.Warn("tagged statsd sink: dropping statistics", "addr", s.addr, "error", err)
		s.failed = true
	}
}

func (s *taggedSink) close() error {
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn = nil
	return err
}
