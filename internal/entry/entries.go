package entry

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Entries is a flush's stream entries of one layout, written without first
// decoding them into a Batch: each table's COPY stream is read from the
// entries themselves (TableReader), one table record decompressed at a time
// while PostgreSQL reads the one before. A flush then holds its entries'
// compressed bytes and one record's rows instead of a whole batch's rows,
// which it had to grow into (copying) and touch afresh: in CPU profiles of
// the Redis path that was a quarter of the collector's time.
//
// Rows are checked (checksum, shape, count) as they are read, so a damaged
// entry is found mid-write: the reader fails and the write must be abandoned
// and done again through a Batch, whose AddTo refuses the entry (the
// flush worker quarantines it).
type Entries struct {
	lay     *tables.Layout
	recs    [tables.NumTables][]tableRecord
	rows    [tables.NumTables]int
	size    [tables.NumTables]int
	entries int
	buf     []byte // the record being read, decompressed; kept for the next
	// decoded is table i's rows of every entry, decompressed and checked,
	// when Tuples read them: its reader reads them from here
	// rather than decompress and check every record again. Its memory is
	// kept across resets.
	decoded [tables.NumTables][]byte
}

// Reset empties s for entries of layout l, keeping its memory.
func (s *Entries) Reset(l *tables.Layout) {
	s.lay = l
	for i := range s.recs {
		s.recs[i] = s.recs[i][:0]
		s.decoded[i] = s.decoded[i][:0]
	}
	s.rows, s.size, s.entries = [tables.NumTables]int{}, [tables.NumTables]int{}, 0
}

// Layout is the layout of the entries' rows.
func (s *Entries) Layout() *tables.Layout { return s.lay }

// Add adds an entry of Format, which must be of s's layout. It reads
// only the table headers; the entry's data must stay unchanged until s is
// reset. Nothing is added when a header is malformed.
func (s *Entries) Add(data []byte) error {
	desc, r, err := splitEntry(data)
	if err != nil {
		return err
	}
	if string(desc) != string(s.lay.Descriptor()) {
		return fmt.Errorf("%w: its columns differ from the batch's", ErrMalformed)
	}
	var recs [tables.NumTables]tableRecord
	var seen [tables.NumTables]bool
	for len(r) > 0 {
		t, err := readTable(&r)
		if err == nil && seen[t.table] {
			err = errors.New("a table twice")
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		recs[t.table], seen[t.table] = t, true
	}
	for i, t := range recs {
		if seen[i] {
			s.recs[i] = append(s.recs[i], t)
			s.rows[i] += int(t.rows)
			s.size[i] += int(t.size)
		}
	}
	s.entries++
	return nil
}

// Len is the number of entries added.
func (s *Entries) Len() int { return s.entries }

// Rows is the number of rows of table i.
func (s *Entries) Rows(i int) int { return s.rows[i] }

// Size is the bytes of table i's rows, decompressed.
func (s *Entries) Size(i int) int { return s.size[i] }

// TotalRows is the number of rows of every table.
func (s *Entries) TotalRows() int {
	n := 0
	for _, r := range s.rows {
		n += r
	}
	return n
}

// FirstInt64Range is pgcopy.FirstInt64Range over table i's rows in every
// entry: the range of its first column (a time), known before the rows are
// copied, so that the writer can pick the partition they fall in. ok is
// false when a record is damaged (the reader then finds it and fails).
func (s *Entries) FirstInt64Range(i int) (lo, hi int64, ok bool) {
	all, ok := s.Tuples(i)
	if !ok {
		return 0, 0, false
	}
	return pgcopy.FirstInt64Range(all, len(s.lay.Table(i).Columns))
}

// Tuples returns table i's rows of every entry, decompressed and checked
// (checksum, shape, count), for the writer to route them by their first
// column. They are decoded once: the table's reader then reads them as they
// are. ok is false when there is none or a record is damaged (the reader
// then finds it and fails). The slice is s's: it changes at the next Reset.
func (s *Entries) Tuples(i int) ([]byte, bool) {
	if len(s.recs[i]) == 0 {
		return nil, false
	}
	if len(s.decoded[i]) > 0 {
		return s.decoded[i], true
	}
	fields := len(s.lay.Table(i).Columns)
	all := slices.Grow(s.decoded[i][:0], s.size[i])
	for _, rec := range s.recs[i] {
		n := len(all)
		data, err := s.tuplesInto(all[n:n+int(rec.size):n+int(rec.size)], rec, fields)
		if err != nil {
			s.decoded[i] = all[:0]
			return nil, false
		}
		if rec.codec != codecS2 {
			copy(all[n:n+len(data)], data)
		}
		all = all[:n+len(data)]
	}
	s.decoded[i] = all
	return all, true
}

// TableReader returns table i's binary COPY stream. It shares s's decoding
// buffer: read one table at a time.
func (s *Entries) TableReader(i int) *TableReader {
	return &TableReader{s: s, table: i, fields: len(s.lay.Table(i).Columns), cur: pgcopy.Header()}
}

// TableReader reads one table of Entries as a binary COPY stream.
type TableReader struct {
	s      *Entries
	table  int
	fields int
	next   int    // the next record of s.recs[table] to read
	cur    []byte // what is left to hand out before the next record
	done   bool   // the trailer has been queued
	err    error
}

// Read implements io.Reader. A damaged record fails the read with an error
// wrapping ErrMalformed, which Err returns too.
func (r *TableReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		recs := r.s.recs[r.table]
		switch {
		case r.next == 0 && len(r.s.decoded[r.table]) > 0:
			r.cur, r.next = r.s.decoded[r.table], len(recs)
		case r.next < len(recs):
			r.cur, r.err = r.s.tuples(recs[r.next], r.fields)
			r.next++
		case !r.done:
			r.cur, r.done = pgcopy.Trailer(), true
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// Err is the damage the reader found, if any: when set, PostgreSQL was told
// the COPY failed, and its error says only that.
func (r *TableReader) Err() error { return r.err }

// tuples returns a record's rows, decompressed into s.buf, after checking
// them.
func (s *Entries) tuples(t tableRecord, fields int) ([]byte, error) {
	if t.codec == codecS2 {
		s.buf = slices.Grow(s.buf[:0], int(t.size))[:t.size]
	}
	return s.tuplesInto(s.buf, t, fields)
}

// tuplesInto returns a record's rows after checking them: decompressed into
// dst (t.size bytes) when compressed, else t's own bytes.
func (s *Entries) tuplesInto(dst []byte, t tableRecord, fields int) ([]byte, error) {
	name := s.lay.Table(t.table).Name
	data := t.data
	if t.codec == codecS2 {
		err := t.checkLen()
		if err == nil {
			err = t.decode(dst[:t.size])
		}
		if err != nil {
			return nil, fmt.Errorf("%w: table %s: %v", ErrMalformed, name, err)
		}
		data = dst[:t.size]
	}
	n, err := pgcopy.CheckTuples(data, fields)
	if err == nil && uint64(n) != t.rows {
		err = fmt.Errorf("%d rows where the header says %d", n, t.rows)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: table %s: %v", ErrMalformed, name, err)
	}
	return data, nil
}
