// Command sigterm sends SIGTERM to a loaded sluice and checks the shutdown
// promises:
//
//  1. no in-flight call fails: every call started before the signal gets a
//     real answer (OK), not an error;
//  2. calls started after the signal are answered promptly, whatever the
//     answer (they may be refused at connect): none hangs;
//  3. the process exits with status 0 within -exit-within of the signal.
//
// "In flight" is made unambiguous: just before the signal the Redis under
// sluice is paused for writes (CLIENT PAUSE -hold WRITE), so every caller's
// call is parked inside sluice, waiting for its counters, when SIGTERM
// arrives; none is still on its way. Those calls must be drained, not cut.
// With -hold 0 (or -backend memory) there is no pause: calls are short and
// a call the client started a moment before the signal may reach a closed
// listener, so that mode tests a narrower promise and says so.
//
//	go run ./loadtest/sigterm [-callers 32] [-hold 400ms]
package main
