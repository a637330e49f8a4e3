// Package engine is the rate limit domain logic of sluice, with no network I/O:
// the rule model (from YAML or xDS), validation, descriptor matching, cache keys,
// window arithmetic and the algorithms (the reference's fixed window, and
// sluice's sliding window and token bucket), decisions and their statistics,
// and response headers.
//
// Counters live behind the small Backend interface; engine/memory, engine/redis
// and engine/memcache implement it. The engine never talks to a backend itself:
// it hands its counter operations to a Counter (the actors package gathers
// those of many decisions into one backend call per shard), and the
// requests a server read together to ShouldRateLimitBatch as one batch
// (engine.Batch; docs/architecture.md draws the path).
package engine
