package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v2"
)

// parseGeneric is ParseYAML's first pass: the file decoded as a generic
// map, with one document only (yaml.v2's Unmarshal reads the first and
// silently drops the rest, so a second domain after "---" would vanish),
// and every key checked (validateKeys). It returns the message of the
// first problem, with the line and the field where the decoder's own
// message names neither.
func parseGeneric(data []byte) (map[any]any, string) {
	var generic map[any]any
	if err := yaml.Unmarshal(data, &generic); err != nil {
		return nil, "error loading config file: " + describeYAMLError(data, err)
	}
	if line := secondDocument(data); line > 0 {
		return nil, fmt.Sprintf("config error, a second YAML document starts at line %d: one file holds one domain's rules; put the other in a file of its own", line)
	}
	msg := validateKeys(generic)
	if strings.HasPrefix(msg, badLeafPrefix) {
		key := strings.TrimPrefix(msg, badLeafPrefix)
		key, _, _ = strings.Cut(key, "'")
		if n := lineOfKey(data, key); n > 0 {
			msg += fmt.Sprintf(" (line %d)", n)
		}
	}
	return generic, msg
}

// secondDocument is the line of a second YAML document in data with
// anything in it (0: none).
func secondDocument(data []byte) int {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var first, second any
	if err := dec.Decode(&first); err != nil {
		return 0
	}
	if err := dec.Decode(&second); errors.Is(err, io.EOF) || (err == nil && second == nil) {
		return 0
	}
	// Where it starts: the first "---", or the second when one opens the
	// file.
	want := 1
	if docOpensFile(data) {
		want = 2
	}
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "---") {
			if want--; want == 0 {
				return i + 1
			}
		}
	}
	return 1
}

// docOpensFile says whether data's first content line is "---".
func docOpensFile(data []byte) bool {
	for _, l := range strings.Split(string(data), "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			return strings.HasPrefix(t, "---")
		}
	}
	return false
}

// badLeafPrefix starts the message of a value of a type no rule field has
// (a fraction, or a whole number past 64 bits that yaml.v2 reads as one).
const badLeafPrefix = "error checking config: '"

// badLeaf keeps the reference's "error checking config" and says which
// field and what is wrong with it.
func badLeaf(key string, v any) string {
	return fmt.Sprintf("%s%s' is %v: not a string, a boolean or a whole number in range (requests_per_unit and burst: 0 to 4294967295)",
		badLeafPrefix, key, v)
}

// typeErrLine matches one of yaml.v2's unmarshal errors.
var typeErrLine = regexp.MustCompile("^(\\s*line (\\d+): )cannot unmarshal (\\S+) `([^`]*)`")

// describeYAMLError adds to each of a yaml.v2 unmarshal error's lines the
// field the value belongs to ("line 6: requests_per_unit: cannot
// unmarshal !!int `-1` into uint32"): yaml.v2 names the line and the Go
// type only.
func describeYAMLError(data []byte, err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		m := typeErrLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		if key := keyOnLine(data, n, m[4]); key != "" {
			lines[i] = m[1] + key + ": " + strings.TrimPrefix(l, m[1])
			if strings.HasSuffix(l, "into uint32") {
				lines[i] += " (a whole number from 0 to 4294967295)"
			}
		}
	}
	return strings.Join(lines, "\n")
}

// keyOnLine is the key whose value is lit on line n (1-based) of data, in
// block ("key: lit") or flow ("{a: 1, key: lit}") style; "" if none.
func keyOnLine(data []byte, n int, lit string) string {
	lines := strings.Split(string(data), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	l := lines[n-1]
	i := strings.Index(l, ": "+strings.TrimSuffix(lit, "...")) // yaml.v2 cuts long ones
	if i < 0 {
		return ""
	}
	start := strings.LastIndexAny(l[:i], "{,-") + 1
	return strings.Trim(strings.TrimSpace(l[start:i]), `"'`)
}

// lineOfKey is the first line (1-based) holding key as a mapping key (0:
// none).
func lineOfKey(data []byte, key string) int {
	for i, l := range strings.Split(string(data), "\n") {
		for _, sep := range []string{key + ":", `"` + key + `":`} {
			if j := strings.Index(l, sep); j >= 0 && (j == 0 || strings.ContainsRune(" \t{,-", rune(l[j-1]))) {
				return i + 1
			}
		}
	}
	return 0
}

// escapeControl writes the control characters of s (CR and LF among them)
// as Go escapes, so that a rule key holding one stays on one /rlconfig
// line.
func escapeControl(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
