// Package algofig draws docs/configuration.md's figure of the three rate limit
// algorithms at a window edge, from a simulated run of the real engine (in
// memory, on a simulated clock), so the figure always shows what the code
// does. `go run ./internal/algofig/cmd > docs/algorithms.svg` writes it; a
// test fails when the committed file is stale.
package algofig
