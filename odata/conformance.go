package odata

import (
	"context"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/odata/internal/csvsafe"
	"github.com/sluicehq/sluice/odata/internal/jsonenc"
	"github.com/sluicehq/sluice/odata/query"
)

// The generic OData v4 parts of the API: $metadata, /<Collection>/$count,
// entity by key, @odata.context and CSV. None of them changes what the
// official DataStream clients receive: they never ask for these paths and
// never announce OData (see metadataLevel).

// metaLevel is how much OData control information a response carries.
type metaLevel uint8

const (
	// metadataAbsent: the request did not announce OData (the DataStream
	// clients): pages stay {"value":[…],"@odata.nextLink":…} as the
	// compatibility spec fixes them.
	metadataAbsent metaLevel = iota
	// metadataNone: Accept asked for odata.metadata=none.
	metadataNone
	// metadataMinimal: an OData client (OData-MaxVersion or OData-Version
	// sent, or odata.metadata=minimal|full in Accept or $format).
	metadataMinimal
)

func metadataLevel(ctx *fasthttp.RequestCtx) metaLevel {
	accept := strings.ToLower(string(ctx.Request.Header.Peek("Accept")))
	format := strings.ToLower(string(ctx.QueryArgs().Peek("$format")))
	for _, s := range []string{format, accept} {
		if strings.Contains(s, "odata.metadata=none") {
			return metadataNone
		}
		if strings.Contains(s, "odata.metadata=") {
			return metadataMinimal
		}
	}
	h := &ctx.Request.Header
	if len(h.Peek("OData-MaxVersion")) > 0 || len(h.Peek("OData-Version")) > 0 {
		return metadataMinimal
	}
	return metadataAbsent
}

// contextURL is the @odata.context of a response about q: the service's
// $metadata, the entity set, the selected properties when not all, and
// suffix ("/$entity" for a single entity).
func (s *Server) contextURL(ctx *fasthttp.RequestCtx, q *query.Query, suffix string) []byte {
	b := s.appendServiceRoot(nil, ctx)
	b = append(b, "/$metadata#"...)
	b = append(b, q.Collection.Name...)
	if !q.AllFields() {
		b = append(b, '(')
		for i, fi := range q.Fields {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, q.Collection.Fields[fi].Name...)
		}
		b = append(b, ')')
	}
	return append(b, suffix...)
}

// wantsCSV decides the format of a page: $format first, else the Accept
// header when it ranks text/csv at least as high as any JSON type it lists.
// The DataStream clients send Accept: application/vnd.api+json.
func wantsCSV(ctx *fasthttp.RequestCtx, q *query.Query) bool {
	switch q.Format {
	case query.FormatCSV:
		return true
	case query.FormatJSON:
		return false
	}
	accept := string(ctx.Request.Header.Peek("Accept"))
	if accept == "" {
		return false
	}
	csvQ, jsonQ := -1.0, -1.0
	for _, part := range strings.Split(accept, ",") {
		mt, params, _ := strings.Cut(part, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
		v := 1.0
		for _, p := range strings.Split(params, ";") {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil && f >= 0 && f <= 1 {
					v = f
				} else {
					v = 0
				}
			}
		}
		switch {
		case mt == "text/csv":
			csvQ = max(csvQ, v)
		case mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")):
			jsonQ = max(jsonQ, v)
		}
	}
	return csvQ > 0 && csvQ >= jsonQ
}

// metadata answers $metadata: CSDL XML, or CSDL JSON when $format or
// Accept asks for JSON.
func (s *Server) metadata(ctx *fasthttp.RequestCtx, params []query.Param) {
	asJSON := false
	for _, p := range params {
		switch p.Name {
		case "$format":
			mt, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(p.Value)), ";")
			switch mt {
			case "json", "application/json":
				asJSON = true
			case "xml", "application/xml":
			default:
				s.fail(ctx, fasthttp.StatusBadRequest, "$format of $metadata must be xml or json, got "+strconv.Quote(p.Value))
				return
			}
		default:
			if strings.HasPrefix(p.Name, "$") {
				s.fail(ctx, fasthttp.StatusBadRequest, "query option "+p.Name+" does not apply to $metadata (only $format)")
				return
			}
		}
	}
	if !hasParam(params, "$format") {
		accept := strings.ToLower(string(ctx.Request.Header.Peek("Accept")))
		asJSON = strings.Contains(accept, "application/json") && !strings.Contains(accept, "xml")
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.Add("Vary", "Accept")
	if asJSON {
		ctx.SetContentType(jsonType)
		ctx.SetBody(s.csdlJSON)
		return
	}
	ctx.SetContentType("application/xml; charset=utf-8")
	ctx.SetBody(s.csdlXML)
}

func hasParam(params []query.Param, name string) bool {
	for _, p := range params {
		if p.Name == name && strings.TrimSpace(p.Value) != "" {
			return true
		}
	}
	return false
}

// countOnly answers /<Collection>/$count: the number of rows matching
// $filter, as plain text.
func (s *Server) countOnly(ctx *fasthttp.RequestCtx, q *query.Query, rec *accessRecord) {
	budget, cancel := context.WithTimeout(s.base, s.opts.QueryTimeout)
	defer cancel()
	sctx, span := s.child(budget, rec.span, "odata.count")
	n, err := s.store.Count(sctx, q)
	endSpan(span, err)
	if err != nil {
		s.dbFailed(ctx, budget, err)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBody(strconv.AppendInt(nil, n, 10))
}

// entity answers /Observations(1), /Metadata('<uuid>') (also written
// (Id=1) or with an unquoted UUID): one row as an object with its
// @odata.context, or 404. $select applies; options that make sense only for
// collections are refused.
func (s *Server) entity(ctx *fasthttp.RequestCtx, t target, params []query.Param) (found bool) {
	q, want, raw, ok := s.entityQuery(ctx, t, params)
	if !ok {
		return false
	}
	budget, cancel := context.WithTimeout(s.base, s.opts.QueryTimeout)
	defer cancel()
	var row []byte
	if want.Int >= 1 || t.coll.UUIDKey {
		var err error
		if row, err = s.readEntity(budget, q, want); err != nil {
			s.dbFailed(ctx, budget, err)
			return false
		}
	}
	if row == nil {
		s.fail(ctx, fasthttp.StatusNotFound, "no row of /"+t.coll.Name+" has the Id "+strconv.Quote(raw))
		return false
	}
	b := []byte{'{'}
	if metadataLevel(ctx) != metadataNone {
		b = append(b, `"@odata.context":`...)
		b = appendJSONString(b, string(s.contextURL(ctx, q, "/$entity")))
		if len(row) > 2 {
			b = append(b, ',')
		}
	}
	s.write(ctx, fasthttp.StatusOK, append(b, row[1:]...))
	return true
}

// entityQuery is the query of one entity: its options checked, its key
// parsed (raw is the key's text) into the page of one row. It answers 400
// itself when they are wrong.
func (s *Server) entityQuery(ctx *fasthttp.RequestCtx, t target, params []query.Param) (q *query.Query, want query.Key, raw string, ok bool) {
	c := t.coll
	for _, p := range params {
		switch p.Name {
		case "$filter", "$top", "$skiptoken", "$count", "$orderby", "$skip":
			if strings.TrimSpace(p.Value) != "" {
				s.fail(ctx, fasthttp.StatusBadRequest, p.Name+" does not apply to a single entity (/"+c.Name+"(key)); use $select")
				return nil, want, "", false
			}
		}
	}
	q, err := query.Parse(c, params)
	if err != nil {
		s.badQuery(ctx, err)
		return nil, want, "", false
	}
	if q.Format == query.FormatCSV {
		s.fail(ctx, fasthttp.StatusBadRequest, "$format=csv applies to collections, not to a single entity")
		return nil, want, "", false
	}
	raw = strings.TrimSpace(t.key)
	if k, v, ok := strings.Cut(raw, "="); ok && strings.TrimSpace(k) == "Id" {
		raw = strings.TrimSpace(v)
	}
	if c.UUIDKey {
		u, ok := query.ParseUUID(strings.TrimSuffix(strings.TrimPrefix(raw, "'"), "'"))
		if !ok {
			s.fail(ctx, fasthttp.StatusBadRequest, "the key of /"+c.Name+" is a UUID: /"+c.Name+"('<uuid>'), got "+strconv.Quote(t.key))
			return nil, want, "", false
		}
		want.UUID = u
		q.Filter = &query.Compare{Field: "Id", Op: query.OpEq, Value: query.Literal{Type: query.LitUUID, Text: u}}
	} else {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 0 || raw[0] == '+' {
			s.fail(ctx, fasthttp.StatusBadRequest, "the key of /"+c.Name+" is an integer Id: /"+c.Name+"(1), got "+strconv.Quote(t.key))
			return nil, want, "", false
		}
		want.Int = n
		// Keyset paging from just before the key reads that one row
		// through the primary key.
		q.After = query.Key{Int: n - 1}
	}
	q.Top = 1
	return q, want, raw, true
}

// readEntity reads the one row of q when it is the one wanted: its JSON
// object, or nil when there is none.
func (s *Server) readEntity(ctx context.Context, q *query.Query, want query.Key) ([]byte, error) {
	page, err := s.store.Probe(ctx, q)
	if err != nil || page.Rows != 1 || page.First != want {
		return nil, err
	}
	cur, err := s.store.Rows(ctx, q, page)
	if err != nil {
		return nil, err
	}
	defer cur.Close()
	var row []byte
	if cur.Next() {
		row = appendRow(nil, q, fieldKeys(q), cur.Values())
	}
	return row, cur.Err()
}

// appendCSVHeader writes the header line: the selected field names in
// field order.
func appendCSVHeader(b []byte, q *query.Query) []byte {
	for i, fi := range q.Fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendCSVField(b, []byte(q.Collection.Fields[fi].Name))
	}
	return append(b, '\r', '\n')
}

// appendCSVRow writes one RFC 4180 record: the same values as the JSON
// row, null as an empty field, numbers as JSON writes them, arrays as their
// JSON text.
func appendCSVRow(b []byte, q *query.Query, vals []query.Value) []byte {
	for i, fi := range q.Fields {
		if i > 0 {
			b = append(b, ',')
		}
		v := &vals[i]
		if v.Null {
			continue
		}
		if k := q.Collection.Fields[fi].Kind; jsonenc.IsNumber(k) {
			b = jsonenc.AppendNumber(b, k, v)
		} else if csvsafe.Formula(v.Bytes) {
			b = appendCSVFormula(b, v.Bytes)
		} else {
			b = appendCSVField(b, v.Bytes)
		}
	}
	return append(b, '\r', '\n')
}

// appendCSVFormula writes a text cell a spreadsheet would run as a formula
// as text: quoted, with a leading single quote (package csvsafe).
func appendCSVFormula(b, v []byte) []byte {
	b = append(b, '"', csvsafe.Prefix)
	for _, c := range v {
		if c == '"' {
			b = append(b, '"')
		}
		b = append(b, c)
	}
	return append(b, '"')
}

// appendCSVField quotes a field when it holds a comma, a quote, a line
// break or leading/trailing space, doubling inner quotes (RFC 4180 §2). An
// empty string is written as "" so that it differs from null.
func appendCSVField(b, v []byte) []byte {
	if len(v) > 0 && v[0] != ' ' && v[len(v)-1] != ' ' && !csvQuoted(v) {
		return append(b, v...)
	}
	b = append(b, '"')
	for _, c := range v {
		if c == '"' {
			b = append(b, '"')
		}
		b = append(b, c)
	}
	return append(b, '"')
}

// csvQuotes marks the bytes that make a field quoted.
var csvQuotes = [256]bool{',': true, '"': true, '\r': true, '\n': true}

// csvQuoted reports whether v holds a byte of csvQuotes (bytes.ContainsAny
// builds its set on every call; a page asks once per cell).
func csvQuoted(v []byte) bool {
	for _, c := range v {
		if csvQuotes[c] {
			return true
		}
	}
	return false
}
