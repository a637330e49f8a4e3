// Command redis-kill kills the Redis under a loaded sluice for 10 s and
// checks what sluice promises about a backend that goes away:
//
//  1. every request is answered within SLUICE_BACKEND_TIMEOUT plus a margin
//     (-margin), before, during and after the outage;
//  2. while Redis is down, every answer is gRPC Unavailable (never OK, never
//     a hang, never another code);
//  3. once Redis is back (same port, empty, as after a crash without
//     persistence), sluice answers OK again within -recover, without a
//     restart, and every call started after its first OK is OK.
//
// Calls that straddle the kill or the restart are not held to 2 or 3: they
// may see either state. The program prints what it observed per phase and
// exits 1 when a promise breaks.
//
//	go run ./loadtest/redis-kill [-down 10s] [-callers 16]
package main
