//go:build !linux

package odata

import "net"

// watchPeerClose cannot tell a closed peer here: a waiting request whose
// client went away waits out its bound instead.
func watchPeerClose(net.Conn) (<-chan struct{}, func()) { return nil, func() {} }
