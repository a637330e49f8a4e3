// Command slow-odata-reader checks that the OData server streams a page
// instead of building it in memory: several clients ask for 10,000-row
// pages of /Records and read them very slowly, and the server's resident
// memory must stay flat.
//
// Each reader has its own API key (the API refuses parallel requests of one
// key), a small socket receive buffer and a 4 KiB read buffer, so the
// kernel cannot soak up the page and back-pressure reaches the server. The
// program:
//
//  1. reads one page at full speed to learn its size B, then records the
//     server's idle RSS (median of 5 samples) as the baseline;
//  2. starts -readers readers that read at -rate bytes/s each for -slow,
//     sampling the server's RSS (VmRSS of /proc/<pid>/status) twice a
//     second;
//  3. lets them finish at full speed and checks every page arrived whole
//     (status 200, valid JSON, the expected row count).
//
// Promises (exit 1 when one breaks):
//
//   - bounded: the highest RSS while the readers crawl exceeds the idle
//     baseline by less than -allow-share (half) of readers × B, what holding
//     the unread pages would cost. A streaming server still spends some
//     memory per request (buffers, its database connection's page cache),
//     so this does not ask for zero; a server that buffers whole pages
//     cannot pass;
//   - flat: over the slow phase RSS does not grow (harness.GrowthRule,
//     last-third median ≤ first-third median × 1.05 + 8 MiB);
//   - whole: every page is complete once read.
//
// The server: `-server self` (the default) runs the OData API in a child
// process of this program, built from the odata package over an embedded
// SQLite filled with generated data. It stands in for `sluice serve`, which
// does not start the OData API yet: WAITING FOR cmd/sluice to serve OData;
// once it does, run the scenario against it with -server external -url
// <root> -keys k1,k2,... -pid <pid of sluice>.
//
//	go run ./loadtest/slow-odata-reader [-readers 8] [-slow 30s] [-rate 32768]
package main
