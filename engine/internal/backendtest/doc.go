// Package backendtest holds the checks every engine.Backend must pass for
// the operations a lease relies on (OpReserve, OpRelease, OpTokenTake), so
// that the memory, Redis and memcache backends are held to one table and
// one model (engine.TokenBucketTake) instead of three hand-written copies.
// Each backend's tests call it with the store's own view of a key, read by
// an independent client.
package backendtest
