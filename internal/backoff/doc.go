// Package backoff computes the waits between retries: exponential growth
// from an initial wait, capped, with jitter. The Redis backend's startup
// retries and the memcache backend's compare-and-swap retries use it.
package backoff
