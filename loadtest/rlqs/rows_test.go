package main

import (
	"strings"
	"testing"
)

func TestParseFlood(t *testing.T) {
	for _, c := range []struct {
		in, err string
	}{
		{in: "1000x1000"},
		{in: "200x1000"},
		{in: "unread"},
		{in: "streams:10000"},
		{in: "big:100000"},
		{in: "0x1000", err: "STREAMSxBUCKETS"},
		{in: "1000", err: "STREAMSxBUCKETS"},
		{in: "flood", err: "STREAMSxBUCKETS"},
		{in: "unread:5", err: "unread takes no count"},
		{in: "streams:", err: "streams wants a positive count"},
		{in: "streams:-3", err: "streams wants a positive count"},
		{in: "big:many", err: "big wants a positive count"},
	} {
		row, err := parseFlood(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.in, err)
		case c.err == "" && (row.run == nil || row.name != c.in):
			t.Errorf("%q: row %q, run set %v", c.in, row.name, row.run != nil)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want one saying %q", c.in, err, c.err)
		}
	}
}
