// Command odata-costly-filter checks that costly $filter requests cannot
// take the OData API from an innocent client.
//
// It starts `sluice odata` over a generated SQLite store (-rows) with no
// per-second limit, then for -duration -attackers keys (8, the size of the
// store's pool) send, one request at a time as fast as they are answered,
// the filter of the issue: 256 endswith terms (about 10 KB), which took
// seconds to tens of seconds per request; -heavy keys (2) send the
// costliest filter within the budget, 30 endswith alternatives on
// /Records?$top=10000 (a full scan evaluating 30 conditions per row), to
// keep the database busy; an innocent key asks
// /Observations?$top=1&$filter=CharacteristicName eq 'pH' every -every.
// With -baseline (for a server without the budget) the attackers' answers
// are not judged, so the run shows what the innocent key gets there.
//
// Promises (exit 1 when one breaks):
//
//   - the innocent key gets 200 on every request, each within -max-latency
//     (it used to wait 10-14 s and get 500);
//
//   - every over-budget filter gets 400 naming the budget, at once (no SQL
//     runs for it);
//
//   - no request of anyone gets 500.
//
// Run it alone from the repository root, after make build:
//
//	go run ./loadtest/odata-costly-filter [-attackers 4] [-duration 20s]
package main
