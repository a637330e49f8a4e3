//go:build !linux

package netx

import "net"

// Pending cannot peek here: a drain closes a connection idle for its idle
// time without knowing whether a request waits in the socket.
func Pending(net.Conn) bool { return false }
