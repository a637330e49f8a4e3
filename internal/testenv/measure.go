package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Percentile is the nearest-rank p-quantile (0 < p <= 1) of sorted: the
// smallest value with at least p of the values at or below it, i.e.
// sorted[ceil(p·n)-1]. Zero for an empty slice. It is the one definition
// bench, the load-test scenarios and the tests report, so that their p99 of
// the same data agree.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// RSS is a process's resident set size in bytes, from /proc/<pid>/status.
func RSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("testenv: %w", err)
	}
	defer f.Close()
	return ParseVmRSS(f)
}

// ParseVmRSS reads the VmRSS line of a /proc/<pid>/status file ("VmRSS:
// 12345 kB") and returns bytes.
func ParseVmRSS(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if strings.TrimSpace(unit) != "kB" {
			return 0, fmt.Errorf("testenv: VmRSS unit %q, want kB", unit)
		}
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || kb < 0 || kb > 1<<40 {
			return 0, fmt.Errorf("testenv: VmRSS value %q", num)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("testenv: reading status: %w", err)
	}
	return 0, errors.New("testenv: no VmRSS line (a kernel thread, or the process is gone)")
}

// clockTicks is USER_HZ, 100 on Linux for every architecture Go supports.
const clockTicks = 100

// CPUSeconds is the user+system CPU time a process has used, from
// /proc/<pid>/stat.
func CPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("testenv: %w", err)
	}
	return ParseStatCPU(string(b))
}

// ParseStatCPU reads utime+stime (fields 14 and 15) of a /proc/<pid>/stat
// line, in seconds.
func ParseStatCPU(stat string) (float64, error) {
	// The command name may hold spaces and parentheses; the fields resume
	// after its last closing paren.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("testenv: /proc stat line without a command name")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("testenv: /proc stat line has %d fields after the name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 63)
	stime, err2 := strconv.ParseUint(f[12], 10, 63)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("testenv: /proc stat utime %q stime %q", f[11], f[12])
	}
	return (float64(utime) + float64(stime)) / clockTicks, nil
}
