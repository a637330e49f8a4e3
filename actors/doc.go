// Package actors is sluice's concurrency layer: shard actors (protoactor-go)
// that own the counters' traffic. A descriptor's cache key picks its shard by
// xxhash; each shard batches the increments that arrive while its backend call
// is in flight and sends them as one call, coalescing equal keys.
//
// The Router implements engine.Counter, so the engine never sees actors.
package actors
