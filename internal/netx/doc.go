// Package netx keeps a listening server alive when the process runs short
// of file descriptors or a client opens connections without end: Listen
// wraps a net.Listener so that Accept retries the errors a busy process
// recovers from (EMFILE and the like) with a growing wait, as net/http
// does, instead of returning them to a server that would stop; and so that
// connections beyond a cap are answered with a short refusal and closed
// rather than served.
package netx
