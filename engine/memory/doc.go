// Package memory is the embedded counter backend (BACKEND_TYPE=memory): counters
// in a map, each with the expiry its last increment set, dropped once expired.
// It makes no network call; the actors package gives every shard its own
// Backend, so a shard's counters are touched by one goroutine at a time.
package memory
