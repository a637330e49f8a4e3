package main

import (
	"strings"
	"testing"
)

func TestParsePin(t *testing.T) {
	for _, tc := range []struct {
		in             string
		server, client string
		err            bool
	}{
		{in: ""},
		{in: "1/0", server: "1", client: "0"},
		{in: "2-3/0,1", server: "2-3", client: "0,1"},
		{in: "1", err: true},
		{in: "1/", err: true},
		{in: "/0", err: true},
		{in: "a/0", err: true},
		{in: "1-x/0", err: true},
		{in: "1;rm -rf/0", err: true},
	} {
		p, err := parsePin(tc.in)
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), "-pin") {
				t.Errorf("parsePin(%q) = %+v, %v; want an error naming -pin", tc.in, p, err)
			}
			continue
		}
		if err != nil || p.server != tc.server || p.client != tc.client {
			t.Errorf("parsePin(%q) = %+v, %v; want server %q client %q", tc.in, p, err, tc.server, tc.client)
		}
	}
}
