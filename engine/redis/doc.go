// Package redis stores rate-limit counters in Redis (single node over TCP or
// a unix socket, sentinel-managed primary, or cluster) through go-redis v9.
//
// One Exec is one pipelined round trip of INCRBY key hits + EXPIRE
// key ttl per key (GET key for a read, engine.OpGet), the reference
// implementation's protocol, so sluice and envoyproxy/ratelimit replicas can
// share one Redis during a migration. In cluster mode go-redis splits the
// pipeline per node.
//
// Commands are never retried by the client: a retried INCRBY whose first
// attempt reached the server would count the hits twice.
package redis
