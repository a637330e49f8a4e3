package query

import (
	"fmt"
)

// Error is a request that was decoded but is not valid: an unknown field, a
// bad filter, $top out of range. Detail names the field or token.
type Error struct{ Detail string }

func (e *Error) Error() string { return e.Detail }

func errorf(format string, args ...any) error {
	return &Error{Detail: fmt.Sprintf(format, args...)}
}
