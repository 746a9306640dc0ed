package rows

import (
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/postgrescopy/postgrescopy/internal/jsonb"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
)

// Batch accumulates the COPY streams of every table for one transaction.
// A Batch is not safe for concurrent use; reuse it after Reset.
type Batch struct {
	enc [numTables]pgcopy.Encoder
	ctx context
}

// Reset empties the batch and keeps its buffers.
func (b *Batch) Reset() {
	for i := range b.enc {
		b.enc[i].Reset()
	}
}

// Rows is the number of rows of table i.
func (b *Batch) Rows(i int) int { return b.enc[i].Rows() }

// TotalRows is the number of rows over every table.
func (b *Batch) TotalRows() int {
	n := 0
	for i := range b.enc {
		n += b.enc[i].Rows()
	}
	return n
}

// Data returns table i's binary COPY stream (nil when it has no rows). It is
// valid until the batch is written to again.
func (b *Batch) Data(i int) ([]byte, error) { return b.enc[i].Bytes() }

func (b *Batch) begin(i int) *pgcopy.Encoder {
	e := &b.enc[i]
	e.BeginRow(len(Tables[i].Columns))
	return e
}

// context holds what every row under one resource and scope repeats, encoded
// once rather than for each row.
type context struct {
	service     string
	resource    pcommon.Resource
	resSchema   string
	resJSON     []byte
	scope       pcommon.InstrumentationScope
	scopeSchema string
	scopeJSON   []byte
}

func (c *context) setResource(r pcommon.Resource, schemaURL string) {
	c.resource = r
	c.resSchema = schemaURL
	c.service = ""
	if v, ok := r.Attributes().Get("service.name"); ok {
		c.service = v.AsString()
	}
	c.resJSON = jsonb.AppendMap(c.resJSON[:0], r.Attributes())
}

func (c *context) setScope(s pcommon.InstrumentationScope, schemaURL string) {
	c.scope = s
	c.scopeSchema = schemaURL
	c.scopeJSON = jsonb.AppendMap(c.scopeJSON[:0], s.Attributes())
}

// writeTail writes contextColumns.
func (c *context) writeTail(e *pgcopy.Encoder) {
	e.TextOrNull(c.scope.Name())
	e.TextOrNull(c.scope.Version())
	e.JSONB(c.resJSON)
	e.JSONB(c.scopeJSON)
	e.Int32(int32(c.resource.DroppedAttributesCount()))
	e.Int32(int32(c.scope.DroppedAttributesCount()))
	e.TextOrNull(c.resSchema)
	e.TextOrNull(c.scopeSchema)
}

// timestamp writes a nanosecond time as timestamptz plus its sub-microsecond rest.
func timestamp(e *pgcopy.Encoder, t pcommon.Timestamp) {
	e.Timestamptz(uint64(t))
	e.Int16(int16(uint64(t) % 1000))
}

// optionalTimestamp is timestamp with NULLs for an unset (zero) time.
func optionalTimestamp(e *pgcopy.Encoder, t pcommon.Timestamp) {
	if t == 0 {
		e.Null()
		e.Null()
		return
	}
	timestamp(e, t)
}

func jsonMap(e *pgcopy.Encoder, m pcommon.Map) {
	pos := e.BeginJSONB()
	e.AppendBuf(func(b []byte) []byte { return jsonb.AppendMap(b, m) })
	e.End(pos)
}

// appendHexID appends an id as a quoted lower-case hex JSON string.
func appendHexID(dst []byte, id []byte) []byte {
	const hexdig = "0123456789abcdef"
	dst = append(dst, '"')
	for _, c := range id {
		dst = append(dst, hexdig[c>>4], hexdig[c&0xf])
	}
	return append(dst, '"')
}
