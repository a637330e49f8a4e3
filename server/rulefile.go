package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"
)

// ruleReader reads the rule files of one load within its bounds: regular
// files only, MaxBytes in all, before the deadline.
type ruleReader struct {
	left     int64 // bytes still allowed
	max      int64
	deadline time.Time
	log      *slog.Logger
}

// errReadTimeout is a load that took longer than SLUICE_CONFIG_READ_TIMEOUT.
var errReadTimeout = errors.New("reading the rule files took longer than SLUICE_CONFIG_READ_TIMEOUT")

// read returns the contents of the file at path, or ok false for a file
// that is not a regular one (skipped). The file is opened without
// blocking (O_NONBLOCK: opening a FIFO with no writer would wait for
// one) and checked on the open descriptor, so a file swapped for a FIFO
// between a look and the open is still caught.
func (r *ruleReader) read(path string) (data []byte, ok bool, err error) {
	if time.Now().After(r.deadline) {
		return nil, false, errReadTimeout
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if !st.Mode().IsRegular() {
		r.log.Warn("skipping a rule file that is not a regular file", "file", path, "type", st.Mode().Type().String())
		return nil, false, nil
	}
	if st.Size() > r.left {
		return nil, false, r.tooLarge(path)
	}
	data = make([]byte, 0, st.Size())
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if int64(len(data)+n) > r.left {
			return nil, false, r.tooLarge(path) // grown since the Stat
		}
		data = append(data, buf[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, false, err
		}
		if time.Now().After(r.deadline) {
			return nil, false, errReadTimeout
		}
	}
	r.left -= int64(len(data))
	return data, true, nil
}

func (r *ruleReader) tooLarge(path string) error {
	return fmt.Errorf("%s: the rule files are larger than SLUICE_CONFIG_MAX_BYTES (%d bytes)", path, r.max)
}
