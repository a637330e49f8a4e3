package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	thousand := make([]time.Duration, 1000)
	for i := range thousand {
		thousand[i] = time.Duration(i+1) * time.Microsecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one value", ms(7), 0.99, 7 * time.Millisecond},
		{"median of odd count", ms(1, 2, 3), 0.5, 2 * time.Millisecond},
		{"median of even count is the lower middle", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p50 of 1..100", hundred, 0.50, 50 * time.Millisecond},
		{"p99 of 1..100", hundred, 0.99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 1, 100 * time.Millisecond},
		{"p99.9 of 1..1000", thousand, 0.999, 999 * time.Microsecond},
		{"tiny p is the min", hundred, 0.0001, time.Millisecond},
		{"p99 of two values is the max", ms(1, 9), 0.99, 9 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.sorted, tc.p, got, tc.want)
			}
		})
	}
}

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int64
		ok   bool
	}{
		{"real status", "Name:\tsluice\nVmPeak:\t 1000 kB\nVmRSS:\t   52340 kB\nRssAnon:\t 40000 kB\n", 52340 * 1024, true},
		{"zero", "VmRSS:\t0 kB\n", 0, true},
		{"missing line", "Name:\tkthreadd\nState:\tS (sleeping)\n", 0, false},
		{"wrong unit", "VmRSS:\t12 MB\n", 0, false},
		{"not a number", "VmRSS:\tlots kB\n", 0, false},
		{"negative", "VmRSS:\t-5 kB\n", 0, false},
		{"empty", "", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseVmRSS(strings.NewReader(tc.in))
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("ParseVmRSS = %d, %v; want %d, ok=%v", got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestRSSOfThisProcess(t *testing.T) {
	// A real /proc read: this test process has a resident set.
	rss, err := RSS(os.Getpid())
	if err != nil || rss <= 0 {
		t.Fatalf("RSS(self) = %d, %v", rss, err)
	}
}

func FuzzParseVmRSS(f *testing.F) {
	for _, s := range []string{"VmRSS:\t 1 kB\n", "Name:\tx\nVmRSS:\t99999999999 kB\n", "VmRSS:", "VmRSS: kB kB", "\x00VmRSS:\t1 kB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseVmRSS(strings.NewReader(s))
		if err == nil && (n < 0 || n%1024 != 0) {
			t.Fatalf("ParseVmRSS(%q) = %d without error", s, n)
		}
	})
}

func TestParseStatCPU(t *testing.T) {
	// Fields after the name: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime ...
	line := func(name string, utime, stime string) string {
		return fmt.Sprintf("1234 (%s) S 1 1234 1234 0 -1 4194560 100 0 0 0 %s %s 0 0 20 0 8 0 5 100000 500", name, utime, stime)
	}
	tests := []struct {
		name string
		in   string
		want float64
		ok   bool
	}{
		{"plain", line("sluice", "250", "50"), 3, true},
		{"name with spaces and parens", line("a (b) c", "1", "0"), 0.01, true},
		{"zero", line("x", "0", "0"), 0, true},
		{"no name", "1234 S 1 1 1 0 -1 0 0 0 0 0 1 1", 0, false},
		{"short", "1234 (x) S 1 1234", 0, false},
		{"not a number", line("x", "lots", "0"), 0, false},
		{"negative", line("x", "-1", "0"), 0, false},
		{"empty", "", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStatCPU(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("ParseStatCPU(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestCPUSecondsOfThisProcess(t *testing.T) {
	// A real /proc read: burn a little CPU until the clock ticks over.
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for {
		s, err := CPUSeconds(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if s > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPUSeconds(self) still %v after 10 s of work (%d)", s, x)
		}
		for i := 0; i < 1e6; i++ {
			x += i
		}
	}
}

func FuzzParseStatCPU(f *testing.F) {
	for _, s := range []string{"1 (x) S 1 1 1 0 -1 0 0 0 0 0 5 6 0", "1 (a) b) S 1 1 1 0 -1 0 0 0 0 0 9223372036854775807 9223372036854775807", ")", "(x)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseStatCPU(s)
		if err == nil && (v < 0 || v != v) {
			t.Fatalf("ParseStatCPU(%q) = %v without error", s, v)
		}
	})
}
