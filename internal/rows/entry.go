package rows

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// EntryFormat names the payload AppendEntry writes, for the stream entry's
// format field: a batch as already encoded for COPY, so that a flush worker
// copies an entry's rows into its batch instead of decoding and encoding
// them again.
const EntryFormat = "copy1"

// An entry is:
//
//	uvarint len(descriptor), descriptor
//	per table with rows: byte table index, uvarint rows, uvarint len(tuples), tuples
//
// The descriptor names every table's columns and kinds in order (see
// Layout.Descriptor): replicas configured with other promoted columns, or an
// older release, write rows of another shape, and the reader must COPY them
// with their own column list.

// ErrEntry is a payload that is not an entry of EntryFormat.
var ErrEntry = errors.New("rows: malformed entry")

// Descriptor is the layout's tables, columns and kinds in a canonical binary
// form: two layouts with equal descriptors encode the same rows.
func (l *Layout) Descriptor() []byte {
	if l.desc == nil {
		// Only a Layout built outside NewLayout/ParseLayout gets here.
		return l.descriptor()
	}
	return l.desc
}

func (l *Layout) descriptor() []byte {
	var d []byte
	for i := range l.tables {
		t := &l.tables[i]
		d = appendString(d, t.Name)
		d = binary.AppendUvarint(d, uint64(len(t.Columns)))
		for j, c := range t.Columns {
			d = appendString(d, c)
			d = append(d, byte(t.Kinds[j]))
		}
	}
	return d
}

func appendString(d []byte, s string) []byte {
	d = binary.AppendUvarint(d, uint64(len(s)))
	return append(d, s...)
}

// ParseLayout rebuilds the layout a descriptor describes, for writing entries
// of a shape other than the reader's own. Its tables have the descriptor's
// columns; it encodes no pdata (it has no promotion rules).
func ParseLayout(desc []byte) (*Layout, error) {
	l := &Layout{}
	r := desc
	for i := range l.tables {
		name, ok := readString(&r)
		if !ok || name != Tables[i].Name {
			return nil, fmt.Errorf("%w: table %d", ErrEntry, i)
		}
		n, ok := readUvarint(&r)
		if !ok || n > 1600 { // PostgreSQL's column limit
			return nil, fmt.Errorf("%w: columns of %s", ErrEntry, name)
		}
		t := Table{Name: name, Signal: Tables[i].Signal, Columns: make([]string, n), Kinds: make([]Kind, n)}
		for j := range t.Columns {
			c, ok := readString(&r)
			if !ok || len(r) == 0 || r[0] < byte(KindTimestamptz) || r[0] > byte(KindFloat64Array) {
				return nil, fmt.Errorf("%w: column %d of %s", ErrEntry, j, name)
			}
			t.Columns[j], t.Kinds[j] = c, Kind(r[0])
			r = r[1:]
		}
		l.tables[i] = t
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the tables", ErrEntry, len(r))
	}
	l.desc = append([]byte(nil), desc...)
	return l, nil
}

func readUvarint(r *[]byte) (uint64, bool) {
	v, n := binary.Uvarint(*r)
	if n <= 0 {
		return 0, false
	}
	*r = (*r)[n:]
	return v, true
}

func readString(r *[]byte) (string, bool) {
	n, ok := readUvarint(r)
	if !ok || n > uint64(len(*r)) {
		return "", false
	}
	s := string((*r)[:n])
	*r = (*r)[n:]
	return s, true
}

// AppendEntry appends the batch's rows as an entry of EntryFormat. A batch
// with an encoding error (Data's) is refused.
func (b *Batch) AppendEntry(dst []byte) ([]byte, error) {
	desc := b.layout().Descriptor()
	dst = binary.AppendUvarint(dst, uint64(len(desc)))
	dst = append(dst, desc...)
	for i := range b.enc {
		e := &b.enc[i]
		if err := e.Err(); err != nil {
			return dst, err
		}
		if e.Rows() == 0 {
			continue
		}
		t := e.Tuples(0, e.Rows())
		dst = append(dst, byte(i))
		dst = binary.AppendUvarint(dst, uint64(e.Rows()))
		dst = binary.AppendUvarint(dst, uint64(len(t)))
		dst = append(dst, t...)
	}
	return dst, nil
}

// EntryLen is the size of the entry AppendEntry would write.
func (b *Batch) EntryLen() int {
	n := len(b.layout().Descriptor()) + binary.MaxVarintLen64
	for i := range b.enc {
		n += 1 + 2*binary.MaxVarintLen64 + b.enc[i].Len()
	}
	return n
}

// EntryDescriptor returns the layout descriptor an entry's rows follow,
// without copying it.
func EntryDescriptor(data []byte) ([]byte, error) {
	r := data
	n, ok := readUvarint(&r)
	if !ok || n > uint64(len(r)) {
		return nil, ErrEntry
	}
	return r[:n], nil
}

// AddEntry appends an entry's rows to the batch, which must be of the
// entry's layout (EntryDescriptor equal to Layout().Descriptor()). Nothing
// is added when the entry is malformed.
func (b *Batch) AddEntry(data []byte) error {
	desc, err := EntryDescriptor(data)
	if err != nil {
		return err
	}
	l := b.layout()
	if string(desc) != string(l.Descriptor()) {
		return fmt.Errorf("%w: its columns differ from the batch's", ErrEntry)
	}
	r := data[uvarintLen(uint64(len(desc)))+len(desc):]
	// Check the whole entry before adding any of it.
	type part struct {
		table, rows int
		tuples      []byte
	}
	var parts [numTables]part
	seen := 0
	for len(r) > 0 {
		i := int(r[0])
		r = r[1:]
		rowsN, ok1 := readUvarint(&r)
		size, ok2 := readUvarint(&r)
		if !ok1 || !ok2 || i >= numTables || seen&(1<<i) != 0 || size > uint64(len(r)) {
			return fmt.Errorf("%w: bad table header", ErrEntry)
		}
		seen |= 1 << i
		parts[i] = part{table: i, rows: int(rowsN), tuples: r[:size]}
		r = r[size:]
	}
	added := [numTables]int{}
	for i, p := range parts {
		if p.tuples == nil {
			continue
		}
		n, err := b.enc[i].AppendTuples(p.tuples, len(l.tables[i].Columns))
		if err == nil && n != p.rows {
			err = fmt.Errorf("%d rows where the header says %d", n, p.rows)
		}
		if err != nil {
			for j := range i {
				b.enc[j].Truncate(b.enc[j].Rows() - added[j])
			}
			if n > 0 {
				b.enc[i].Truncate(b.enc[i].Rows() - n)
			}
			return fmt.Errorf("%w: table %s: %v", ErrEntry, l.tables[i].Name, err)
		}
		added[i] = n
	}
	return nil
}

func uvarintLen(v uint64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], v)
}
