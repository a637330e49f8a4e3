// Command odata-costly-filter checks that costly $filter requests cannot
// take the OData API from an innocent client (issue 12, item 2).
//
// It starts `sluice odata` over a generated SQLite store (-rows) with no
// per-second limit, then for -duration runs -attackers keys, each sending,
// one request at a time as fast as it is answered, alternately
//
//   - a filter over the cost budget: 256 endswith terms (about 10 KB), the
//     filter that used to take seconds per request, and
//   - the costliest filter within the budget: 30 endswith alternatives on
//     /Records?$top=10000, a full scan evaluating 30 conditions per row,
//
// while an innocent key asks /Observations?$top=1&$filter=CharacteristicName
// eq 'pH' every -every.
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
