package request

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"

	"github.com/postgrescopy/postgrescopy/internal/rows"
)

// Request is what the exporterhelper queue, batcher and retry sender carry:
// a list of parts, each one client request (or a chunk of one) with the key
// it was given when it entered the exporter. The key, not the content, names
// it in the ledger: two identical requests are two events, and a retry of
// one, merged with other neighbours or replayed from a persistent queue, is
// still recognized.
type Request[T any] struct {
	codec *Codec[T]
	parts []*Part[T]
}

// Part is one client request, or a chunk of one, with its key.
type Part[T any] struct {
	// Key names the part in the ledger.
	Key string
	// Data is the part's pdata.
	Data  T
	items int // -1 until counted
	bytes int // -1 until measured
	// chunk marks a piece cut from a larger part: it is never cut again, so
	// that its key always names the same rows.
	chunk bool
	// Sent (Redis mode) marks a part a previous attempt added to the stream;
	// a retry of the request adds only the others.
	Sent bool
}

// Codec is what a request needs to know about one signal's pdata: Traces,
// Metrics and Logs are the three.
type Codec[T any] struct {
	signal string
	items  func(T) int
	bytes  func(T) int // protobuf size, as the Collector's bytes sizer counts it
	// ends feeds the leaves of d (spans, data points, log records) to c, which
	// decides where the chunks of an oversized part end.
	ends func(d T, c *cutter)
	// split cuts d into len(ends) pieces, piece i ending before leaf ends[i].
	split     func(d T, ends []int) []T
	marshal   func(context.Context, T) ([]byte, error)
	unmarshal func([]byte) (context.Context, T, error)
	add       func(*rows.Batch, T)
}

var _ xexporterhelper.Request = (*Request[int])(nil)

// NewKey returns a random 128-bit key in hex: wide enough that two requests
// never share one, with no coordination between replicas.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// Signal is the codec's signal name: traces, metrics or logs.
func (c *Codec[T]) Signal() string { return c.signal }

// Add appends d's rows to b.
func (c *Codec[T]) Add(b *rows.Batch, d T) { c.add(b, d) }

// New is a request of one part holding d, under a new key.
func New[T any](c *Codec[T], d T) *Request[T] {
	return &Request[T]{codec: c, parts: []*Part[T]{newPart(NewKey(), d)}}
}

// NewSized is New with d's size in szt already measured (Size), so that the
// queue does not measure it again.
func NewSized[T any](c *Codec[T], d T, szt exporterhelper.RequestSizerType, size int) *Request[T] {
	r := New(c, d)
	switch szt {
	case exporterhelper.RequestSizerTypeBytes:
		r.parts[0].bytes = size
	case exporterhelper.RequestSizerTypeItems:
		r.parts[0].items = size
	}
	return r
}

// Size is d's size in szt's unit: its protobuf size for bytes, its items
// otherwise.
func Size[T any](c *Codec[T], d T, szt exporterhelper.RequestSizerType) int {
	if szt == exporterhelper.RequestSizerTypeBytes {
		return c.bytes(d)
	}
	return c.items(d)
}

// Split cuts d into pieces of at most maxSize each in szt's unit, in order,
// moving its leaves (d is left empty). A single leaf larger than maxSize is
// a piece alone.
func Split[T any](c *Codec[T], d T, maxSize int, szt exporterhelper.RequestSizerType) []T {
	ct := &cutter{max: maxSize, bytes: szt == exporterhelper.RequestSizerTypeBytes}
	c.ends(d, ct)
	return c.split(d, ct.finish())
}

func newPart[T any](key string, d T) *Part[T] {
	return &Part[T]{Key: key, Data: d, items: -1, bytes: -1}
}

// Items is the part's spans, data points or log records, counted once.
func (p *Part[T]) Items(c *Codec[T]) int { return p.itemsCount(c) }

func (p *Part[T]) itemsCount(c *Codec[T]) int {
	if p.items < 0 {
		p.items = c.items(p.Data)
	}
	return p.items
}

func (p *Part[T]) bytesSize(c *Codec[T]) int {
	if p.bytes < 0 {
		p.bytes = c.bytes(p.Data)
	}
	return p.bytes
}

func (p *Part[T]) size(c *Codec[T], szt exporterhelper.RequestSizerType) int {
	if szt == exporterhelper.RequestSizerTypeBytes {
		return p.bytesSize(c)
	}
	return p.itemsCount(c)
}

// ItemsCount is the spans, data points or log records of every part.
func (r *Request[T]) ItemsCount() int {
	n := 0
	for _, p := range r.parts {
		n += p.itemsCount(r.codec)
	}
	return n
}

// BytesSize is the protobuf size of every part.
func (r *Request[T]) BytesSize() int {
	n := 0
	for _, p := range r.parts {
		n += p.bytesSize(r.codec)
	}
	return n
}

// Codec is the codec of the request's signal.
func (r *Request[T]) Codec() *Codec[T] { return r.codec }

// Parts are the request's parts, in order.
func (r *Request[T]) Parts() []*Part[T] { return r.parts }

// Size is the request's size in szt's unit (items, or bytes; items for any
// other sizer).
func (r *Request[T]) Size(szt exporterhelper.RequestSizerType) int { return r.size(szt) }

func (r *Request[T]) size(szt exporterhelper.RequestSizerType) int {
	if szt == exporterhelper.RequestSizerTypeBytes {
		return r.BytesSize()
	}
	return r.ItemsCount()
}

// Keys are the parts' keys, in order.
func (r *Request[T]) Keys() []string { return r.keys() }

func (r *Request[T]) keys() []string {
	keys := make([]string, len(r.parts))
	for i, p := range r.parts {
		keys[i] = p.Key
	}
	return keys
}

// MergeSplit appends r2's parts to r's and cuts the list into requests of at
// most maxSize. A part is never split unless it alone exceeds maxSize; then it
// starts a request of its own and is cut into chunks at offsets counted from
// its own start, keyed key/0, key/1, ..., so that the same part (replayed
// from a persistent queue after a restart) is cut the same way whatever its
// neighbours. Only the batcher calls it, which also makes the pipeline hand
// the exporter data it may mutate (MutatesData), so parts are moved, not
// copied.
func (r *Request[T]) MergeSplit(_ context.Context, maxSize int, szt exporterhelper.RequestSizerType, r2 xexporterhelper.Request) ([]xexporterhelper.Request, error) {
	if szt != exporterhelper.RequestSizerTypeItems && szt != exporterhelper.RequestSizerTypeBytes {
		return nil, fmt.Errorf("postgrescopy: batch sizer %q is not items or bytes", szt.String())
	}
	all := r.parts
	if r2 != nil {
		o, ok := r2.(*Request[T])
		if !ok {
			return nil, fmt.Errorf("postgrescopy: cannot merge a %T into a %s request", r2, r.codec.signal)
		}
		all = append(all, o.parts...)
	}
	if maxSize <= 0 {
		r.parts = all
		return []xexporterhelper.Request{r}, nil
	}
	// r is the first request out; it is filled in place, never ahead of the
	// part being read.
	out := make([]xexporterhelper.Request, 0, 1)
	cur, curSize := r, 0
	r.parts = all[:0]
	next := func() {
		if len(cur.parts) > 0 {
			out = append(out, cur)
			cur, curSize = &Request[T]{codec: r.codec}, 0
		}
	}
	for _, p := range all {
		s := p.size(r.codec, szt)
		if s > maxSize && !p.chunk {
			next()
			for _, c := range r.codec.cut(p, maxSize, szt) {
				next()
				cur.parts = append(cur.parts, c)
				curSize = c.size(r.codec, szt)
			}
			continue
		}
		if curSize+s > maxSize {
			next()
		}
		cur.parts = append(cur.parts, p)
		curSize += s
	}
	if len(cur.parts) > 0 || len(out) == 0 {
		out = append(out, cur)
	}
	return out, nil
}

// cut splits an oversized part into chunks of at most maxSize each (a single
// leaf larger than maxSize is a chunk alone: it is written, not dropped).
func (c *Codec[T]) cut(p *Part[T], maxSize int, szt exporterhelper.RequestSizerType) []*Part[T] {
	pieces := Split(c, p.Data, maxSize, szt)
	out := make([]*Part[T], len(pieces))
	for i, d := range pieces {
		out[i] = newPart(p.Key+"/"+strconv.Itoa(i), d)
		out[i].chunk = true
	}
	return out
}

// cutter places chunk boundaries between leaves, in order. In bytes it counts
// an upper bound of each chunk's protobuf size: every leaf with its framing,
// and the header of every container (resource, scope, metric) each time a
// chunk holds part of it, with the widest framing.
type cutter struct {
	max   int
	bytes bool
	hdr   [3]int  // header cost of the containers the walk is in
	paid  [3]bool // the current chunk holds that container already
	depth int     // container levels above a leaf
	used  int     // size of the current chunk
	n     int     // leaves in the current chunk
	i     int     // leaves seen
	ends  []int
}

// containerFraming bounds a nested message's tag and length varint.
const containerFraming = 1 + binary.MaxVarintLen32

// open enters a container at level (0 resource, 1 scope, 2 metric) whose
// own fields (without its leaves or child containers) take size bytes.
func (c *cutter) open(level, size int) {
	if c.bytes {
		c.hdr[level] = size + containerFraming
	}
	for l := level; l < len(c.paid); l++ {
		c.paid[l] = false
	}
	c.depth = max(c.depth, level+1)
}

// leaf adds one leaf whose own protobuf size is size.
func (c *cutter) leaf(size int) {
	cost := 1
	if c.bytes {
		cost = deltaSize(size)
	}
	need := cost
	for l := 0; l < c.depth; l++ {
		if !c.paid[l] {
			need += c.hdr[l]
		}
	}
	if c.n > 0 && c.used+need > c.max {
		c.ends = append(c.ends, c.i)
		c.used, c.n = 0, 0
		need = cost
		for l := 0; l < c.depth; l++ {
			need += c.hdr[l]
		}
	}
	for l := 0; l < c.depth; l++ {
		c.paid[l] = true
	}
	c.used += need
	c.n++
	c.i++
}

func (c *cutter) finish() []int {
	if c.n > 0 {
		c.ends = append(c.ends, c.i)
	}
	return c.ends
}

// deltaSize is what a nested message of size bytes adds to its parent.
func deltaSize(size int) int {
	return 1 + size + varintLen(uint64(size))
}

func varintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// Encoding stores requests in a persistent queue (file_storage) with
// their parts' keys, so that a request replayed after a restart is the same
// request to the ledger.
type Encoding[T any] struct{ codec *Codec[T] }

// NewEncoding is the persistent-queue encoding of c's requests.
func NewEncoding[T any](c *Codec[T]) Encoding[T] { return Encoding[T]{codec: c} }

// encodingVersion leads an encoded request; a later format gets another.
const encodingVersion = 1

// ErrEncoding is a persisted request that cannot be read back.
var ErrEncoding = errors.New("postgrescopy: persisted request is damaged")

// Marshal writes the version, the number of parts, then per part its key,
// whether it is a chunk, and its pdata with ctx (the Collector's own request
// encoding: span context, client metadata) on the first part.
func (e Encoding[T]) Marshal(ctx context.Context, req xexporterhelper.Request) ([]byte, error) {
	r, ok := req.(*Request[T])
	if !ok {
		return nil, fmt.Errorf("postgrescopy: cannot encode a %T as a %s request", req, e.codec.signal)
	}
	buf := []byte{encodingVersion}
	buf = binary.AppendUvarint(buf, uint64(len(r.parts)))
	for i, p := range r.parts {
		pctx := ctx
		if i > 0 {
			pctx = context.Background()
		}
		data, err := e.codec.marshal(pctx, p.Data)
		if err != nil {
			return nil, fmt.Errorf("postgrescopy: encode %s request: %w", e.codec.signal, err)
		}
		buf = binary.AppendUvarint(buf, uint64(len(p.Key)))
		buf = append(buf, p.Key...)
		chunk := byte(0)
		if p.chunk {
			chunk = 1
		}
		buf = append(buf, chunk)
		buf = binary.AppendUvarint(buf, uint64(len(data)))
		buf = append(buf, data...)
	}
	return buf, nil
}

// Unmarshal reads what Marshal wrote; the context is the first part's.
func (e Encoding[T]) Unmarshal(buf []byte) (context.Context, xexporterhelper.Request, error) {
	if len(buf) == 0 || buf[0] != encodingVersion {
		return context.Background(), nil, fmt.Errorf("%w: unknown format", ErrEncoding)
	}
	rest := buf[1:]
	next := func() ([]byte, bool) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return nil, false
		}
		b := rest[w : w+int(n)]
		rest = rest[w+int(n):]
		return b, true
	}
	count, w := binary.Uvarint(rest)
	if w <= 0 || count > uint64(len(rest)) {
		return context.Background(), nil, fmt.Errorf("%w: bad part count", ErrEncoding)
	}
	rest = rest[w:]
	r := &Request[T]{codec: e.codec, parts: make([]*Part[T], 0, count)}
	ctx := context.Background()
	for i := range int(count) {
		key, ok := next()
		if !ok || len(rest) == 0 {
			return ctx, nil, fmt.Errorf("%w: part %d key", ErrEncoding, i)
		}
		chunk := rest[0] == 1
		rest = rest[1:]
		data, ok := next()
		if !ok {
			return ctx, nil, fmt.Errorf("%w: part %d data", ErrEncoding, i)
		}
		pctx, d, err := e.codec.unmarshal(data)
		if err != nil {
			return ctx, nil, fmt.Errorf("%w: part %d: %w", ErrEncoding, i, err)
		}
		if i == 0 {
			ctx = pctx
		}
		p := newPart(string(key), d)
		p.chunk = chunk
		r.parts = append(r.parts, p)
	}
	if len(rest) != 0 {
		return ctx, nil, fmt.Errorf("%w: %d trailing bytes", ErrEncoding, len(rest))
	}
	return ctx, r, nil
}
