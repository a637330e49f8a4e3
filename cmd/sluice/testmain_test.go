package main

import (
	"os"
	"testing"
)

// TestMain runs the sluice command itself when SLUICE_TEST_MAIN is set, so
// that a test can start it as a child process (under prlimit, say) without
// building the binary: os.Args[1:] are the command's.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
