package harness

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// FaultRules are the rules of the scenarios that only need every call
// counted: domain faults, key k, a limit no scenario reaches.
const FaultRules = `domain: faults
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// LogAs sets the standard logger up for program name: its name before every
// line, and the time to the microsecond (the scenarios' phases are read from
// it).
func LogAs(name string) {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix(name + ": ")
}

// Scenario is one run of a program: its work directory, the servers it
// starts through testenv, and the configuration of its sluice.
type Scenario struct {
	Work string
	TB   *testenv.ProgramTB
	// Sluice is bin on backend, its rules under Work/runtime, its log
	// Work/sluice.log; a scenario changes what it needs before starting it.
	Sluice testenv.SluiceConfig
	// Redis is the redis-server started for the redis backend, else nil.
	Redis *testenv.Redis
}

// NewScenario makes the work directory of program name and, for the redis
// backend, starts a redis-server. Close removes both.
func NewScenario(name, bin, backend string) (*Scenario, error) {
	work, err := os.MkdirTemp("", "sluice-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	sc := &Scenario{Work: work, TB: testenv.NewProgramTB(work)}
	sc.Sluice = testenv.DefaultSluiceConfig(filepath.Join(work, "runtime"))
	sc.Sluice.Bin, sc.Sluice.Backend = bin, backend
	sc.Sluice.LogPath = filepath.Join(work, "sluice.log")
	if backend == "redis" {
		sc.Redis = testenv.StartRedis(sc.TB, testenv.RedisOptions{})
		if err := sc.TB.Err(); err != nil {
			sc.Close()
			return nil, err
		}
		sc.Sluice.RedisAddr = sc.Redis.Addr
	}
	return sc, nil
}

// Close stops what the scenario started and removes its work directory.
func (sc *Scenario) Close() {
	sc.TB.RunCleanups()
	os.RemoveAll(sc.Work)
}

// StopClean is the last promise of every scenario that starts sluice: on
// SIGTERM it exits 0 within grace. It appends the broken promise, if any.
func StopClean(broken []string, s *testenv.Sluice, grace time.Duration) []string {
	if err := s.Stop(grace); err != nil {
		return append(broken, err.Error())
	}
	return broken
}
