package rows

import (
	"bytes"
	"crypto/sha256"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/postgrescopy/postgrescopy/internal/jsonb"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Batch accumulates the COPY streams of every table for one transaction.
// A Batch is not safe for concurrent use; reuse it after Reset.
type Batch struct {
	enc [tables.NumTables]pgcopy.Encoder
	ctx context
	lim Limits
	lay *tables.Layout // nil: tables.DefaultLayout()
	// key hashes what a row's shard key is derived from (shardkey.go).
	key xxhash.Digest
	// The bytes of a metric row, from the row's start, that name its series.
	seriesFrom, seriesTo int

	// Promoted values of the current row, and the keys dropped from its
	// attributes' JSONB.
	vals []promoVal
	skip []string
	// The promoted sources' key index per table (resolve), for ownLay, and
	// what the current row's attributes hold for each source: hitVal[r] is
	// valid when hitAt[r] is the row's stamp hitGen.
	ownLay *tables.Layout
	ownIdx [tables.NumTables]*ownKeyIndex
	hitAt  []uint32
	hitVal []pcommon.Value
	hitGen uint32

	// seen holds the contexts whose dictionary row the batch holds.
	seen map[[16]byte]struct{}

	rejects []Reject
	// Scratch space for shrinking a row over lim.MaxRow.
	fields [][]byte
	sizes  []int
	row    []byte
}

// Limits bound what one value and one row may take, so that a hostile or
// buggy item cannot exceed what PostgreSQL accepts (1 GB a value, 255 MB a
// jsonb document) or crowd out its batch. Zero means no bound.
type Limits struct {
	// MaxValue bounds each text value, JSON string (keys too) and bytes
	// value's base64 text, in bytes as stored; a longer one is cut and ends
	// with pgcopy's truncation marker.
	MaxValue int
	// MaxRow bounds a row's encoded size. A longer row has its text and jsonb
	// values shrunk (see shrinkRow); numbers and arrays are never cut.
	MaxRow int
}

// minShare is the least a shrunk value keeps: room for a marker.
const minShare = 64

// SetLimits applies l to the rows added from now on; Reset keeps it.
func (b *Batch) SetLimits(l Limits) {
	b.lim = l
	for i := range b.enc {
		b.enc[i].SetMaxValue(l.MaxValue)
	}
	b.ctx.json = jsonb.Encoder{MaxValue: l.MaxValue}
	b.ctx.fields.SetMaxValue(l.MaxValue)
}

// SetLayout makes the batch encode rows of l (nil: DefaultLayout); set it
// before adding rows.
func (b *Batch) SetLayout(l *tables.Layout) { b.lay = l }

// Layout is the tables the batch encodes.
func (b *Batch) Layout() *tables.Layout { return b.layout() }

// Encoder is table i's binary COPY encoder, for the entry format
// (internal/entry), which appends and reads whole tables of tuples.
func (b *Batch) Encoder(i int) *pgcopy.Encoder { return &b.enc[i] }

func (b *Batch) layout() *tables.Layout {
	if b.lay == nil {
		return tables.DefaultLayout()
	}
	return b.lay
}

// traceID writes a trace id column: NULL when absent, on Citus too (the
// shard key, not the trace id, is the distribution column).
func (b *Batch) traceID(e *pgcopy.Encoder, id [16]byte) { e.UUID(id) }

// Reset empties the batch and keeps its buffers and limits.
func (b *Batch) Reset() {
	for i := range b.enc {
		b.enc[i].Reset()
	}
	clear(b.seen)
	b.rejects = b.rejects[:0]
}

// Reject is a row that PostgreSQL refused: the writer stored it in the
// rejects table instead of its own.
type Reject struct {
	Table int // index into the batch's tables.Layout
	Row   int // the row's index within its table's stream
	Err   error
}

// Rejects lists the rows the last write refused, in the order found.
func (b *Batch) Rejects() []Reject { return b.rejects }

// AddReject records a refused row; the writer calls it.
func (b *Batch) AddReject(r Reject) { b.rejects = append(b.rejects, r) }

// ClearRejects forgets the rejects of a write that did not commit.
func (b *Batch) ClearRejects() { b.rejects = b.rejects[:0] }

// Tuples returns rows lo to hi-1 of table i as encoded, for re-sending a
// subset with pgcopy.NewReader. It is valid until the batch is written to.
func (b *Batch) Tuples(i, lo, hi int) []byte { return b.enc[i].Tuples(lo, hi) }

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
	e.BeginRow(len(b.layout().Table(i).Columns))
	return e
}

// addRow writes one row of table i with write, which begins it (begin) and
// writes every field. A row over the row limit is written again with every
// object's keys in their own order rather than jsonb's (jsonb.Encoder's
// Unordered), then shrunk: which members a cut keeps must not depend on an
// order chosen for PostgreSQL's parser.
func (b *Batch) addRow(i int, write func()) {
	write()
	if b.lim.MaxRow <= 0 || len(b.enc[i].LastRow()) <= b.lim.MaxRow {
		return
	}
	if c := &b.ctx; !c.json.Unordered {
		b.enc[i].DropLastRow()
		res, scope := c.resJSON, c.scopeJSON
		c.json.Unordered = true
		// The slow path may allocate: fresh buffers keep the ordered ones.
		c.resJSON = c.json.AppendMap(nil, c.resource.Attributes())
		c.scopeJSON = c.json.AppendMap(nil, c.scope.Attributes())
		c.resSkipOK = false
		c.gen++
		write()
		c.json.Unordered = false
		c.resJSON, c.scopeJSON = res, scope
		c.resSkipOK = false
		c.gen++
	}
	b.shrinkRow(i)
}

// context holds what every row under one resource and scope repeats, encoded
// once rather than for each row.
type context struct {
	json        jsonb.Encoder
	service     string
	resource    pcommon.Resource
	resSchema   string
	resJSON     []byte
	scope       pcommon.InstrumentationScope
	scopeSchema string
	scopeJSON   []byte

	// The resource's JSON without keys that promoted columns removed, for
	// the removal mask resSkipMask; resSkipOK until the resource changes.
	resSkipJSON []byte
	resSkipKeys []string
	resSkipMask uint64
	resSkipOK   bool

	// fields encodes a row's context; id is the context_id of idFields,
	// the context met last.
	fields   pgcopy.Encoder
	idFields []byte
	id       [16]byte
	idOK     bool
	// gen counts the changes to what a context is encoded from (setResource,
	// setScope, the JSON documents rebuilt): while it is idGen and a row's
	// resource JSON is the slice idRes, the row's context is idFields, and
	// writeContext need not encode and compare it again.
	gen, idGen uint64
	idRes      []byte
}

func (c *context) setResource(r pcommon.Resource, schemaURL string) {
	c.resource = r
	c.resSchema = schemaURL
	c.service = ""
	c.resSkipOK = false
	c.gen++
	if v, ok := r.Attributes().Get("service.name"); ok {
		c.service = v.AsString()
	}
	c.resJSON = c.json.AppendMap(c.resJSON[:0], r.Attributes())
}

func (c *context) setScope(s pcommon.InstrumentationScope, schemaURL string) {
	c.scope = s
	c.scopeSchema = schemaURL
	c.scopeJSON = c.json.AppendMap(c.scopeJSON[:0], s.Attributes())
	c.gen++
}

// writeContext writes a row's context_id, with resJSON as its resource's
// attributes (without the keys promoted columns removed), and the first time
// the batch meets that context, its row of the dictionary (tables.IdxContexts).
//
// The id is the first 128 bits of the SHA-256 of the context's eight fields
// as encoded for COPY: the same resource and scope give the same id in every
// batch and on every replica, so the writer inserts a context it has not
// seen committed and the dictionary keeps one row of it.
func (b *Batch) writeContext(e *pgcopy.Encoder, resJSON []byte) {
	c := &b.ctx
	if !c.idOK || c.idGen != c.gen || !sameSlice(resJSON, c.idRes) {
		f := &c.fields
		f.Reset()
		f.BeginRow(len(tables.ContextColumns))
		f.TextOrNull(c.scope.Name())
		f.TextOrNull(c.scope.Version())
		f.JSONB(resJSON)
		f.JSONB(c.scopeJSON)
		f.Int32(int32(c.resource.DroppedAttributesCount()))
		f.Int32(int32(c.scope.DroppedAttributesCount()))
		f.TextOrNull(c.resSchema)
		f.TextOrNull(c.scopeSchema)
		fields := f.LastRow()[2:] // after the field count
		if !c.idOK || !bytes.Equal(fields, c.idFields) {
			sum := sha256.Sum256(fields)
			copy(c.id[:], sum[:16])
			c.idFields = append(c.idFields[:0], fields...)
			c.idOK = true
		}
		c.idGen, c.idRes = c.gen, resJSON
	}
	fields := c.idFields
	e.UUIDValue(c.id)
	if _, ok := b.seen[c.id]; ok {
		return
	}
	if b.seen == nil {
		b.seen = map[[16]byte]struct{}{}
	}
	b.seen[c.id] = struct{}{}
	d := &b.enc[tables.IdxContexts]
	d.BeginRow(1 + len(tables.ContextColumns))
	d.UUIDValue(c.id)
	d.Fields(fields, len(tables.ContextColumns))
	if b.lim.MaxRow > 0 && len(d.LastRow()) > b.lim.MaxRow {
		// The row limit holds for a context as for the rows it once was
		// part of; its id stays that of the whole context. A cut keeps
		// members in jsonb's order here (the context is encoded once).
		b.shrinkRow(tables.IdxContexts)
	}
}

// sameSlice reports whether a and b are the same bytes in memory.
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
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

func (c *context) jsonMap(e *pgcopy.Encoder, m pcommon.Map) {
	pos := e.BeginJSONB()
	e.AppendBuf(func(b []byte) []byte { return c.json.AppendMap(b, m) })
	e.End(pos)
}

// attributes writes a row's attribute map without the top-level keys in
// skip: its jsonb column, then its long strings' text[] column
// (tables.LongSuffix). A row written again to be cut to the row limit
// (Unordered) keeps every value in the jsonb, where shrinkRow cuts
// documents.
func (c *context) attributes(e *pgcopy.Encoder, m pcommon.Map, skip []string) {
	long := tables.LongString
	if c.json.Unordered {
		long = 0
	}
	pos := e.BeginJSONB()
	e.AppendBuf(func(b []byte) []byte { return c.json.AppendMapSplit(b, m, skip, long) })
	e.End(pos)
	n := 0
	for k, v := range m.All() {
		if jsonb.IsLong(v, long) && !slices.Contains(skip, k) {
			n++
		}
	}
	if n == 0 {
		e.Null()
		return
	}
	pos = e.BeginTextArray(2 * n)
	for k, v := range m.All() {
		if jsonb.IsLong(v, long) && !slices.Contains(skip, k) {
			e.ArrayText(k)
			e.ArrayText(v.Str())
		}
	}
	e.End(pos)
}

// enumText writes an OTLP enum by name, or by number when it has no name
// (a value newer than this pdata, or a buggy sender), which String makes "".
func enumText(e *pgcopy.Encoder, name string, v int32) {
	if name == "" {
		var buf [12]byte
		name = string(strconv.AppendInt(buf[:0], int64(v), 10))
	}
	e.Text(name)
}

// duration is end − start in nanoseconds, negative when the end comes first,
// and clamped to bigint: only spans over 292 years reach the clamp.
func duration(start, end uint64) int64 {
	if end >= start {
		return int64(min(end-start, math.MaxInt64))
	}
	if d := start - end; d < 1<<63 {
		return -int64(d)
	}
	return math.MinInt64
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
