package engine

import (
	"errors"
	"time"
)

// Entry is one key/value pair of a descriptor.
type Entry struct {
	Key   string
	Value string
}

// LimitOverride is a limit carried by the request (Envoy's descriptor "limit").
type LimitOverride struct {
	RequestsPerUnit uint32
	Unit            Unit
}

// Descriptor is one request descriptor.
type Descriptor struct {
	Entries []Entry
	Limit   *LimitOverride
	// HitsAddend, when non-nil, replaces the request's hits for this
	// descriptor; 0 checks the limit without counting.
	HitsAddend *uint64
}

// Request asks for one decision.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// HitsAddend is the request-level count; 0 means 1.
	HitsAddend uint32
}

// Code is a decision.
type Code int32

// The numbers are Envoy's RateLimitResponse.Code values.
const (
	CodeUnknown   Code = 0
	CodeOK        Code = 1
	CodeOverLimit Code = 2
)

func (c Code) String() string {
	switch c {
	case CodeOK:
		return "OK"
	case CodeOverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// CurrentLimit describes the limit that applied to a descriptor. Statuses
// share it with their rule: read it, never write it.
type CurrentLimit struct {
	RequestsPerUnit uint32
	Unit            Unit
	Name            string
}

// DescriptorStatus is the result of one descriptor.
type DescriptorStatus struct {
	Code         Code
	CurrentLimit *CurrentLimit // nil when no limit applied (or unlimited)
	// LimitRemaining is MaxUint32 for an unlimited rule.
	LimitRemaining     uint32
	DurationUntilReset time.Duration // 0 when no limit applied
}

// Header is a response header for Envoy to add.
type Header struct {
	Key   string
	Value string
}

// Response is a decision for a whole request.
type Response struct {
	OverallCode     Code
	Statuses        []DescriptorStatus
	Headers         []Header
	DynamicMetadata map[string]any // nil unless RESPONSE_DYNAMIC_METADATA
}

// Errors of a decision. Test with errors.Is; the text of the returned error is
// the reference's message.
var (
	// ErrInvalidRequest: the request itself is wrong (empty domain, no descriptors, bad override).
	ErrInvalidRequest = errors.New("invalid rate limit request")
	// ErrNoConfig: no configuration has been loaded yet.
	ErrNoConfig = errors.New("no rate limit configuration loaded")
	// ErrBackend: the counters could not be read or written in time.
	ErrBackend = errors.New("rate limit backend error")
)

// requestError carries the reference's message while matching a kind sentinel.
type requestError struct {
	kind error
	msg  string
	err  error
}

func (e *requestError) Error() string {
	if e.err != nil && e.msg == "" {
		return e.err.Error()
	}
	return e.msg
}
func (e *requestError) Is(target error) bool { return target == e.kind }
func (e *requestError) Unwrap() error        { return e.err }

func invalidRequest(msg string) error { return &requestError{kind: ErrInvalidRequest, msg: msg} }

// BackendError wraps a counter failure so that errors.Is(err, ErrBackend) holds
// and the message is the backend's own.
func BackendError(err error) error { return &requestError{kind: ErrBackend, err: err} }
