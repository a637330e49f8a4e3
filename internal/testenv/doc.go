// Package testenv starts real servers (redis-server, redis-sentinel, a Redis
// cluster, memcached, PostgreSQL) on free loopback ports in temporary
// directories for tests, benchmarks and load-test programs, and stops them
// again in Cleanup.
//
// It is also the one harness for processes those programs start and
// measure: StartProcess and WaitReady (any server, in its own process group,
// with a log), StartSluice (`sluice ratelimit` on three free ports, healthy),
// RSS and CPUSeconds of a pid from /proc, and Percentile, the nearest-rank
// definition every p50/p99 that bench/ and loadtest/ report uses.
//
// The functions take the small TB interface rather than *testing.T so that a
// benchmark harness or a load-test main can use them with its own adapter.
// When a server binary is missing, the caller is skipped with a message that
// names the binary and the Debian package to install, unless
// SLUICE_REQUIRE_SERVERS=1 is set (as in CI), in which case it fails.
//
// Every server is started in its own process group and bound to 127.0.0.1
// only; Cleanup kills the whole group so no orphan survives a test. The
// processes also get a parent-death signal, so a test binary that is killed
// outright does not leave servers behind.
package testenv
