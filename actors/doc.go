// Package actors is sluice's concurrency layer: shard actors (protoactor-go)
// that own the counters' traffic. A descriptor's cache key picks its shard by
// xxhash; each shard gathers the counter operations that arrive while its
// backend calls are in flight and sends them as one call, coalescing equal
// keys. It owns the batch protocol's hold: while a batch (requests a server
// read together, engine.Batch) is open, shards with network calls wait for
// its operations (Router.OpenBatch, BatchPolicy).
//
// The Router implements engine.Counter, so the engine never sees actors.
package actors
