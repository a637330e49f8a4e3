package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodePage reads one OData page, {"value":[{...},...], ...}, as a stream
// (only the current row is held) and counts the rows of value. Every row
// must be an object with an Id; the page must be one complete object.
func DecodePage(r io.Reader) (int, error) {
	dec := json.NewDecoder(r)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0, fmt.Errorf("harness: page does not start with an object: %v %v", t, err)
	}
	rows := -1
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return 0, err
		}
		name, _ := t.(string)
		if name != "value" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return 0, fmt.Errorf("member %q: %w", name, err)
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return 0, fmt.Errorf("value is not an array: %v %v", t, err)
		}
		rows = 0
		for dec.More() {
			var row map[string]json.RawMessage
			if err := dec.Decode(&row); err != nil {
				return rows, fmt.Errorf("row %d: %w", rows, err)
			}
			if _, ok := row["Id"]; !ok {
				return rows, fmt.Errorf("row %d has no Id", rows)
			}
			rows++
		}
		if _, err := dec.Token(); err != nil {
			return rows, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return rows, fmt.Errorf("page does not end: %w", err)
	}
	if dec.More() {
		return rows, errors.New("data after the end of the page")
	}
	if rows < 0 {
		return 0, errors.New("page has no value member")
	}
	return rows, nil
}
