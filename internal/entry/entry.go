package entry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/s2"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

func readUvarint(r *[]byte) (uint64, bool) {
	v, n := binary.Uvarint(*r)
	if n <= 0 {
		return 0, false
	}
	*r = (*r)[n:]
	return v, true
}

// Format names the payload Append writes, for the stream entry's format
// field: a batch as already encoded for COPY, so that a flush worker copies
// an entry's rows into its batch (or streams them into COPY) instead of
// decoding and encoding them again.
const Format = "copy3"

// Formats are the formats this release reads, all one encoding whose
// descriptor names each table's columns (tables.ParseLayout): copy1 of a
// layout without the context dictionary, copy2 with it, copy3 with the long
// strings' text[] columns, a column kind that a copy2 reader cannot parse.
// Each new kind of layout takes a new name because a reader leaves an entry
// of a format it does not know pending, for a replica that reads it to
// claim, where a known format whose descriptor did not parse would go to
// the quarantine. Entries of the earlier formats still pending at an
// upgrade are written as they are.
var Formats = []string{"copy1", "copy2", Format}

// Reads reports whether this release decodes entries of format.
func Reads(format string) bool { return slices.Contains(Formats, format) }

// Rows is what an entry is made from and read into: a rows.Batch, one
// binary COPY encoder per table of its layout.
type Rows interface {
	Layout() *tables.Layout
	Encoder(i int) *pgcopy.Encoder
}

// An entry is:
//
//	uvarint len(descriptor), descriptor
//	per table with rows:
//	  byte table index, byte codec, uvarint rows, uvarint len(tuples)
//	  codecRaw: tuples
//	  codecS2:  uvarint len(block), xxhash64(tuples) big-endian, S2 block of tuples
//
// The descriptor names every table's columns and kinds in order (see
// tables.Layout.Descriptor): replicas configured with other promoted columns, or an
// older release, write rows of another shape, and the reader must COPY them
// with their own column list.
//
// The reader refuses an entry past any of the limits below, and the flush worker
// takes a refused entry for a damaged one; so each limit is one constant (or
// check) that the writing side obeys too: tables.NewLayout (MaxColumns),
// Append (maxTableSize, ratioFits).

// ErrMalformed is a payload that is not an entry of Format.
var ErrMalformed = errors.New("entry: malformed entry")

// ErrTooLarge is a batch with a table too large for an entry
// (maxTableSize): Append refuses it rather than write what no reader
// accepts.
var ErrTooLarge = errors.New("entry: table too large for a stream entry")

// Table codecs in an entry.
const (
	codecRaw = 0
	codecS2  = 1 // S2 block, checked by the raw tuples' xxhash64
)

// maxRatio bounds the size a compressed table may claim, so that a corrupt
// header cannot make the reader allocate without limit. Encoded rows
// usually compress 8 to 30 times, but S2's repeat codes take long runs (a
// large value repeated row after row) far past the bound; Append then
// writes Snappy's block format instead, which S2 decodes and whose copies
// (at most 64 bytes for 3) cannot pass it.
const maxRatio = 1024

// ratioFits reports whether a compressed table of clen bytes may claim size
// bytes: the reader's check, and the writer's.
func ratioFits(size, clen uint64) bool { return size <= clen*maxRatio+64 }

// recordOrder is the order Append writes tables in: the context dictionary
// first (it is small, and the writer inserts it before it copies the rows
// that reference it), then the signal tables. A reader takes any order.
var recordOrder = func() []int {
	o := []int{tables.IdxContexts}
	for i := range tables.NumSignalTables {
		o = append(o, i)
	}
	return o
}()

// Append appends b's rows as an entry of Format, each
// table compressed with S2 when compress is set and it helps. S2 was picked
// over LZ4 by measurement on encoded spans: about 4 times faster to compress
// (1.2 GB/s against 0.29 GB/s on one core here) and twice as small (8 times).
// A batch with an encoding error (Data's) is refused.
func Append(dst []byte, b Rows, compress bool) ([]byte, error) {
	lay := b.Layout()
	desc := lay.Descriptor()
	dst = binary.AppendUvarint(dst, uint64(len(desc)))
	dst = append(dst, desc...)
	for _, i := range recordOrder {
		e := b.Encoder(i)
		if err := e.Err(); err != nil {
			return dst, err
		}
		if e.Rows() == 0 {
			continue
		}
		t := e.Tuples(0, e.Rows())
		if uint64(len(t)) > maxTableSize {
			return dst, fmt.Errorf("%w: %s holds %d bytes of rows, over %d", ErrTooLarge,
				lay.Table(i).Name, len(t), maxTableSize)
		}
		head := len(dst)
		dst = append(dst, byte(i), codecRaw)
		dst = binary.AppendUvarint(dst, uint64(e.Rows()))
		dst = binary.AppendUvarint(dst, uint64(len(t)))
		if compress {
			if bound := s2.MaxEncodedLen(len(t)); bound > 0 {
				at := len(dst) + binary.MaxVarintLen64 + 8
				dst = slices.Grow(dst, at-len(dst)+bound)
				block := s2.Encode(dst[at:at+bound], t)
				if !ratioFits(uint64(len(t)), uint64(len(block))) {
					block = s2.EncodeSnappy(dst[at:at+bound], t)
				}
				if len(block) < len(t) && ratioFits(uint64(len(t)), uint64(len(block))) {
					dst[head+1] = codecS2
					dst = binary.AppendUvarint(dst, uint64(len(block)))
					dst = binary.BigEndian.AppendUint64(dst, xxhash.Sum64(t))
					// The block was written a little further on, where the
					// header could not overlap it: move it into place.
					dst = append(dst, block...)
					continue
				}
			}
		}
		dst = append(dst, t...)
	}
	return dst, nil
}

// Descriptor returns the layout descriptor an entry's rows follow, without
// copying it.
func Descriptor(data []byte) ([]byte, error) {
	desc, _, err := splitEntry(data)
	return desc, err
}

// splitEntry returns an entry's descriptor and its table records.
func splitEntry(data []byte) (desc, records []byte, err error) {
	r := data
	n, ok := readUvarint(&r)
	if !ok || n > uint64(len(r)) {
		return nil, nil, ErrMalformed
	}
	return r[:n], r[n:], nil
}

// tableRecord is one table of an entry.
type tableRecord struct {
	table int
	codec byte
	rows  uint64
	size  uint64 // the tuples' length, decompressed
	sum   uint64 // codecS2: xxhash64 of the tuples
	data  []byte // the tuples (codecRaw) or the S2 block
}

// readTable reads the table record at the start of *r and advances *r.
func readTable(r *[]byte) (tableRecord, error) {
	var t tableRecord
	if len(*r) < 2 {
		return t, errors.New("cut table header")
	}
	t.table, t.codec = int((*r)[0]), (*r)[1]
	*r = (*r)[2:]
	var ok1, ok2 bool
	t.rows, ok1 = readUvarint(r)
	t.size, ok2 = readUvarint(r)
	if !ok1 || !ok2 || t.table >= tables.NumTables || t.size > maxTableSize {
		return t, errors.New("bad table header")
	}
	stored := t.size
	switch t.codec {
	case codecRaw:
	case codecS2:
		clen, ok := readUvarint(r)
		if !ok || len(*r) < 8 || clen > uint64(len(*r)-8) || !ratioFits(t.size, clen) {
			return t, errors.New("bad compressed table header")
		}
		t.sum = binary.BigEndian.Uint64(*r)
		*r = (*r)[8:]
		stored = clen
	default:
		return t, fmt.Errorf("unknown codec %d", t.codec)
	}
	if stored > uint64(len(*r)) {
		return t, errors.New("cut table")
	}
	t.data, *r = (*r)[:stored], (*r)[stored:]
	return t, nil
}

// Size returns the bytes an entry's rows take once added to a batch
// (decompressed), read from its table headers without decompressing.
func Size(data []byte) (int, error) {
	_, r, err := splitEntry(data)
	if err != nil {
		return 0, err
	}
	total := 0
	for len(r) > 0 {
		t, err := readTable(&r)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		total += int(t.size)
	}
	return total, nil
}

// maxTableSize bounds one table's rows in an entry, decompressed: far
// beyond any real request (Redis holds at most 512 MB a value by default),
// it keeps every field length within COPY's int32, sizes within an int and
// Size's sum from overflowing. A variable only so that tests reach it.
var maxTableSize uint64 = math.MaxInt32

// AddTo appends an entry's rows to b, which must be of the entry's layout
// (Descriptor equal to b.Layout().Descriptor()); compressed tables are
// decompressed straight into b's encoders. Nothing is added when the entry
// is malformed.
func AddTo(b Rows, data []byte) error {
	desc, r, err := splitEntry(data)
	if err != nil {
		return err
	}
	if string(desc) != string(b.Layout().Descriptor()) {
		return fmt.Errorf("%w: its columns differ from the batch's", ErrMalformed)
	}
	var added [tables.NumTables]int
	for len(r) > 0 {
		t, err := readTable(&r)
		if err == nil {
			err = addTable(b, t, &added)
		}
		if err != nil {
			for i, n := range added {
				e := b.Encoder(i)
				e.Truncate(e.Rows() - n)
			}
			return fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	return nil
}

// checkLen checks that a compressed record's block decodes to its size.
func (t tableRecord) checkLen() error {
	if dl, err := s2.DecodedLen(t.data); err != nil || uint64(dl) != t.size {
		return errors.New("compressed length mismatch")
	}
	return nil
}

// decode decompresses a compressed record into dst, t.size bytes, and
// checks the tuples' checksum.
func (t tableRecord) decode(dst []byte) error {
	if _, err := s2.Decode(dst, t.data); err != nil {
		return err
	}
	if xxhash.Sum64(dst) != t.sum {
		return errors.New("checksum mismatch")
	}
	return nil
}

// addTable appends one table record's rows.
func addTable(b Rows, t tableRecord, added *[tables.NumTables]int) error {
	if added[t.table] != 0 {
		return errors.New("a table twice")
	}
	tb := b.Layout().Table(t.table)
	name, fields := tb.Name, len(tb.Columns)
	e := b.Encoder(t.table)
	var n int
	var err error
	if t.codec == codecRaw {
		n, err = e.AppendTuples(t.data, fields)
	} else {
		if err := t.checkLen(); err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
		n, err = e.AppendTuplesFunc(int(t.size), fields, t.decode)
	}
	if err == nil && uint64(n) != t.rows {
		err = fmt.Errorf("%d rows where the header says %d", n, t.rows)
		e.Truncate(e.Rows() - n)
	}
	if err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	added[t.table] = n
	return nil
}
