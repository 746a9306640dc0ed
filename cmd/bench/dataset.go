package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"
)

// numTables is how many tables a workload fills (spans, logs, five metric types).
const numTables = len(tables.Tables)

// copyHeader and copyTrailer frame a binary COPY stream. rows.Batch.Data
// returns whole streams; the dataset files hold many batches, so each batch
// is written without its frame and the file gets one frame of its own.
var (
	copyHeader  = pgcopy.Header()
	copyTrailer = pgcopy.Trailer()
)

// halves is how many files each table is split into: the ceiling's two
// parallel streams each take one, its single stream takes both in turn.
const halves = 2

// dataset is one scale's workload, encoded once by the exporter's own row
// encoder (internal/rows) and kept on disk as binary COPY files that psql
// \copy accepts. Every strategy writes exactly these rows; the collector
// strategies regenerate the same rows (same users, seed and events) in-process.
type dataset struct {
	users int
	seed  uint64
	// files[h][t] is half h of table t; "" when that half has no rows.
	files [halves][numTables]string
	rows  [numTables]int64
	// bytes is the binary COPY payload per table: the size measure every
	// strategy's MB/s is computed from, whatever wire format it uses.
	bytes [numTables]int64
	// encode is how long generating and encoding took: the CPU the
	// collector strategies spend on top of writing.
	encode time.Duration
	// contexts are the dictionary rows written so far: every batch carries
	// the contexts of its rows, the files hold each once (a second copy of
	// a key would fail the \copy), in the file of the half that met it first.
	contexts map[string]bool
	// split holds the files chunks cut, by file and rows per chunk.
	split map[string][]string
}

// chunks cuts the dataset file path into files of at most n rows each, next
// to it, once; the same list afterwards.
func (d *dataset) chunks(path string, n int) ([]string, error) {
	key := path + "\x00" + strconv.Itoa(n)
	if c, ok := d.split[key]; ok {
		return c, nil
	}
	r, err := openCopyFile(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []string
	err = cutRows(r, 0, n, func(chunk []byte) error {
		name := fmt.Sprintf("%s.%d-%d", path, n, len(out))
		out = append(out, name)
		return os.WriteFile(name, chunk, 0o600)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if d.split == nil {
		d.split = map[string][]string{}
	}
	d.split[key] = out
	return out, nil
}

// cutRows passes r's rows to emit as binary COPY streams of at most n rows
// each, in order; with fields > 0 a row of another field count is an error.
// emit's chunk is reused after it returns.
func cutRows(r *copyReader, fields, n int, emit func(chunk []byte) error) error {
	var buf []byte
	rows := 0
	for {
		f, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if fields > 0 && len(f) != fields {
			return fmt.Errorf("a row of %d fields, not %d", len(f), fields)
		}
		if rows == 0 {
			buf = append(buf[:0], copyHeader...)
		}
		buf = append(buf, r.raw...)
		if rows++; rows == n {
			if err := emit(append(buf, copyTrailer...)); err != nil {
				return err
			}
			rows = 0
		}
	}
	if rows > 0 {
		return emit(append(buf, copyTrailer...))
	}
	return nil
}

func (d *dataset) totalRows() int64 {
	var n int64
	for _, r := range d.rows {
		n += r
	}
	return n
}

func (d *dataset) totalBytes() int64 {
	var n int64
	for _, b := range d.bytes {
		n += b
	}
	return n
}

// loadgenConfig is the workload of a scale: the receiver's defaults with the
// bench's users, events and seed.
func loadgenConfig(users, events int, seed uint64, concurrency int) loadgenreceiver.Config {
	return loadgenreceiver.Config{
		Users:           users,
		EventsPerUser:   events,
		MetricsFraction: 0.25,
		LogsFraction:    0.30,
		Concurrency:     concurrency,
		Seed:            seed,
		BatchSize:       500,
	}
}

// buildDataset generates users' workload into dir, split by user into two
// halves (the generator's workers 0 and 1), each table to its own file.
func buildDataset(dir string, users, events int, seed uint64) (*dataset, error) {
	d := &dataset{users: users, seed: seed}
	cfg := loadgenConfig(users, events, seed, halves)
	start := time.Now()
	t0 := time.Now()
	for h := range halves {
		gen, err := loadgenreceiver.NewWorkerGenerator(cfg, start, h)
		if err != nil {
			return nil, fmt.Errorf("loadgen config: %w", err)
		}
		if err := d.writeHalf(dir, h, gen); err != nil {
			return nil, err
		}
	}
	d.encode = time.Since(t0)
	return d, nil
}

func (d *dataset) writeHalf(dir string, h int, gen *loadgenreceiver.Generator) error {
	var (
		files [numTables]*os.File
		bufs  [numTables]*bufio.Writer
		b     rows.Batch
	)
	b.SetLayout(benchLayout)
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	// flush moves the batch's rows to the files, without each batch's frame.
	flush := func() error {
		for t := range numTables {
			data, err := b.Data(t)
			if err != nil {
				return fmt.Errorf("encode %s: %w", benchLayout.Table(t).Name, err)
			}
			if data == nil {
				continue
			}
			if files[t] == nil {
				name := filepath.Join(dir, benchLayout.Table(t).Name+"."+strconv.Itoa(h)+".copy")
				f, err := os.Create(name)
				if err != nil {
					return err
				}
				// psql runs as root here but the file may be read by anyone.
				_ = f.Chmod(0o644)
				files[t], bufs[t] = f, bufio.NewWriterSize(f, 1<<20)
				d.files[h][t] = name
				if _, err := bufs[t].Write(copyHeader); err != nil {
					return err
				}
			}
			body := data[len(copyHeader) : len(data)-len(copyTrailer)]
			n := b.Rows(t)
			if t == tables.IdxContexts {
				body, n = d.newContexts(&b)
			}
			if _, err := bufs[t].Write(body); err != nil {
				return err
			}
			d.rows[t] += int64(n)
			d.bytes[t] += int64(len(body))
		}
		b.Reset()
		return nil
	}
	for {
		more := addNext(gen, &b)
		if err := flush(); err != nil {
			return err
		}
		if !more {
			break
		}
	}
	for t := range numTables {
		if bufs[t] == nil {
			continue
		}
		if _, err := bufs[t].Write(copyTrailer); err != nil {
			return err
		}
		if err := bufs[t].Flush(); err != nil {
			return err
		}
		if err := files[t].Close(); err != nil {
			return err
		}
		files[t] = nil
	}
	return nil
}

// newContexts returns the dictionary rows of b not written before, and
// counts them as written.
func (d *dataset) newContexts(b *rows.Batch) ([]byte, int) {
	if d.contexts == nil {
		d.contexts = map[string]bool{}
	}
	var out []byte
	n := 0
	for k := range b.Rows(tables.IdxContexts) {
		row := b.Tuples(tables.IdxContexts, k, k+1)
		id := string(row[6:22]) // after the field count and the id's length
		if !d.contexts[id] {
			d.contexts[id] = true
			out = append(out, row...)
			n++
		}
	}
	return out, n
}

// copyReader reads the rows of one binary COPY stream. Each row comes back
// as its fields' raw bytes (nil for NULL), in the binary send format of each
// column's type.
type copyReader struct {
	r      *bufio.Reader
	f      io.Closer // the file read, if any
	fields [][]byte
	buf    []byte
	// raw is the row as it appears in the file, field count included; the
	// COPY strategy streams these straight through.
	raw []byte
}

func openCopyFile(name string) (*copyReader, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	c, err := newCopyReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.f = f
	return c, nil
}

// newCopyReader reads the binary COPY stream src, past its header.
func newCopyReader(src io.Reader) (*copyReader, error) {
	r := bufio.NewReaderSize(src, 1<<20)
	hdr := make([]byte, len(copyHeader))
	if _, err := io.ReadFull(r, hdr); err != nil || string(hdr) != string(copyHeader) {
		return nil, errors.New("not a binary COPY file")
	}
	return &copyReader{r: r}, nil
}

func (c *copyReader) Close() error {
	if c.f == nil {
		return nil
	}
	return c.f.Close()
}

var errCorrupt = errors.New("truncated binary COPY row")

// next reads one row; io.EOF after the trailer. The returned fields alias an
// internal buffer valid until the next call.
func (c *copyReader) next() ([][]byte, error) {
	var n [2]byte
	if _, err := io.ReadFull(c.r, n[:]); err != nil {
		return nil, errCorrupt
	}
	count := int16(binary.BigEndian.Uint16(n[:]))
	if count == -1 {
		return nil, io.EOF
	}
	c.buf = append(c.buf[:0], n[:]...)
	offs := make([]int, 0, count)
	lens := make([]int32, 0, count)
	for range count {
		var l [4]byte
		if _, err := io.ReadFull(c.r, l[:]); err != nil {
			return nil, errCorrupt
		}
		c.buf = append(c.buf, l[:]...)
		size := int32(binary.BigEndian.Uint32(l[:]))
		offs = append(offs, len(c.buf))
		lens = append(lens, size)
		if size > 0 {
			start := len(c.buf)
			c.buf = append(c.buf, make([]byte, size)...)
			if _, err := io.ReadFull(c.r, c.buf[start:]); err != nil {
				return nil, errCorrupt
			}
		}
	}
	c.fields = c.fields[:0]
	for i, off := range offs {
		if lens[i] < 0 {
			c.fields = append(c.fields, nil)
			continue
		}
		c.fields = append(c.fields, c.buf[off:off+int(lens[i]):off+int(lens[i])])
	}
	c.raw = c.buf
	return c.fields, nil
}

// addNext adds the generator's next batch of each signal to b and reports
// whether any signal had one.
func addNext(gen *loadgenreceiver.Generator, b *rows.Batch) bool {
	more := false
	if td, ok := gen.NextTraces(); ok {
		b.AddTraces(td)
		more = true
	}
	if md, ok := gen.NextMetrics(); ok {
		b.AddMetrics(md)
		more = true
	}
	if ld, ok := gen.NextLogs(); ok {
		b.AddLogs(ld)
		more = true
	}
	return more
}
