// Command reload-storm rewrites sluice's rule file 100 times under load,
// with bad files mixed in, and checks that:
//
//  1. no request fails: every call during the storm gets an OK answer (a
//     bad file is refused and the previous configuration stays in force);
//  2. every write is seen: each one is followed by exactly the reload
//     outcome it deserves ("Successfully loaded new configuration" for a
//     good file, "Error loading new configuration" for a bad one, counted in
//     sluice's log at LOG_LEVEL=info);
//  3. the last good configuration is the one enforced at the end, though
//     the very last write is a bad file: its probe limit shows in /rlconfig
//     and a fresh probe value gets exactly that many OK answers, then
//     OVER_LIMIT.
//
// The file is rewritten in place (truncate, write), with
// RUNTIME_WATCH_ROOT=false, as an operator editing it would. Each good file
// gives the "probe" key a different hourly limit (20 + its index), which is
// how the enforced configuration is told apart from the others.
//
//	go run ./loadtest/reload-storm [-reloads 100] [-callers 8]
package main
