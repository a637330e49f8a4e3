// Package memcache stores rate-limit counters in memcached through
// gomemcache, the reference implementation's alternative backend.
//
// Per batch one GetMulti reads every counter; the count after a request is
// the stored value plus its hits. The increments themselves are applied
// afterwards by a bounded worker pool owned by the Backend (increment; on a
// miss add with the TTL; when that add loses a race, increment again), as
// the reference does, so a batch costs one round trip on the request path.
// Counts are therefore approximate under concurrency, exactly as in the
// reference.
//
// Where sluice does better than the reference: a GetMulti error fails the
// batch instead of counting from zero; TTLs above memcached's 30-day
// relative limit are sent as absolute times instead of expiring at once;
// health follows whether the servers answer; Close drains pending
// increments within a bound.
package memcache
