package h2grpc

// Flow control: the connection window given back as request bytes are
// used, the peer's SETTINGS and WINDOW_UPDATE applied.

import (
	"errors"

	"golang.org/x/net/http2"
)

// release returns st's request buffer and its share of MaxRequestBytes.
func (c *conn) release(st *stream) {
	if st.msg != nil {
		putBuf(st.msg)
		st.msg = nil
	}
	if st.charged > 0 {
		c.mu.Lock()
		c.buffered -= int64(st.charged)
		c.mu.Unlock()
	}
	st.charged = -1
}

// giveBackLocked returns n bytes of connection window to the peer, in
// batches of a quarter window so that small requests send few updates.
func (c *conn) giveBackLocked(n int) {
	c.recvUnacked += n
	if c.recvUnacked >= int(c.s.o.ConnWindow/4) {
		c.out = appendWindowUpdate(c.out, 0, uint32(c.recvUnacked))
		c.recvUnacked = 0
		c.flushLocked()
	}
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if err := c.settingsAllowed(); err != nil {
		return err
	}
	// Only the last of each setting counts, so that a frame repeating one
	// costs no more than a frame naming it once.
	window, frame := int64(-1), -1
	if err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			window = int64(s.Val)
		case http2.SettingMaxFrameSize:
			frame = int(s.Val) // Valid checked its range
		}
		return nil
	}); err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return connError{http2.ErrCode(ce), "bad SETTINGS: " + err.Error()}
		}
		return connError{http2.ErrCodeProtocol, err.Error()}
	}
	if window > maxWindow {
		return connError{http2.ErrCodeFlowControl, "initial window size too large"}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if window >= 0 {
		delta := window - c.peerInitWindow
		c.peerInitWindow = window
		for _, st := range c.live {
			if st.sendWindow+delta > maxWindow {
				return connError{http2.ErrCodeFlowControl, "a stream window passes 2^31-1"}
			}
			st.sendWindow += delta
		}
	}
	if frame > 0 {
		c.peerMaxFrame = frame
	}
	c.out = appendSettingsAck(c.out)
	c.sendBlockedLocked()
	c.flushLocked()
	return nil
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		if c.connSendWindow+inc > maxWindow {
			return connError{http2.ErrCodeFlowControl, "connection window overflow"}
		}
		c.connSendWindow += inc
	} else if st := c.live[f.StreamID]; st != nil {
		if st.sendWindow+inc > maxWindow {
			c.resets.add(st.id, int(c.s.o.MaxConcurrentStreams))
			c.out = appendRSTStream(c.out, st.id, http2.ErrCodeFlowControl)
			c.resetLocked(st)
		} else {
			st.sendWindow += inc
		}
	}
	c.sendBlockedLocked()
	c.flushLocked()
	return nil
}
