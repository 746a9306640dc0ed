package tables

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrDescriptor is a layout descriptor that does not parse.
var ErrDescriptor = errors.New("tables: malformed layout descriptor")

// MaxColumns is PostgreSQL's column limit: a descriptor with a table of more
// columns is refused (ParseLayout), and so is such a layout (NewLayout).
const MaxColumns = 1600

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
// columns; it encodes no pdata (it has no promotion rules). A descriptor of
// the previous release (no context dictionary) gives a layout whose
// dictionary has no columns.
func ParseLayout(desc []byte) (*Layout, error) {
	l := &Layout{}
	r := desc
	for i := range l.tables {
		if i == IdxContexts && len(r) == 0 {
			// The previous release's layout: no dictionary, each row holds
			// its context's columns (still columns of the stored tables).
			l.tables[i] = Tables[i]
			l.tables[i].Columns, l.tables[i].Kinds = nil, nil
			break
		}
		name, ok := readString(&r)
		if !ok || name != Tables[i].Name {
			return nil, fmt.Errorf("%w: table %d", ErrDescriptor, i)
		}
		n, ok := readUvarint(&r)
		if !ok || n > MaxColumns {
			return nil, fmt.Errorf("%w: columns of %s", ErrDescriptor, name)
		}
		t := Table{Name: name, Store: Tables[i].Store, Signal: Tables[i].Signal, Columns: make([]string, n), Kinds: make([]Kind, n)}
		for j := range t.Columns {
			c, ok := readString(&r)
			if !ok || len(r) == 0 || r[0] < byte(KindTimestamptz) || r[0] > byte(KindTextArray) {
				return nil, fmt.Errorf("%w: column %d of %s", ErrDescriptor, j, name)
			}
			t.Columns[j], t.Kinds[j] = c, Kind(r[0])
			r = r[1:]
		}
		l.tables[i] = t
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the tables", ErrDescriptor, len(r))
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
