package main

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// TestChunksKeepEveryRowInOrder: the ceiling's spans chunks are binary COPY
// files of at most n rows that together hold the file's rows, in order.
func TestChunksKeepEveryRowInOrder(t *testing.T) {
	ds, err := buildDataset(t.TempDir(), 2, 300, 1)
	if err != nil {
		t.Fatal(err)
	}
	path := ds.files[0][tables.IdxSpans]
	readAll := func(name string) (raw []byte, rows int) {
		r, err := openCopyFile(name)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for {
			if _, err := r.next(); err == io.EOF {
				return raw, rows
			} else if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			raw = append(raw, r.raw...)
			rows++
		}
	}
	want, n := readAll(path)
	if n < 20 {
		t.Fatalf("only %d spans in the file", n)
	}
	const size = 7
	chunks, err := ds.chunks(path, size)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != (n+size-1)/size {
		t.Fatalf("%d chunks of %d rows for %d rows", len(chunks), size, n)
	}
	var got []byte
	for i, c := range chunks {
		raw, rows := readAll(c)
		if rows > size || rows == 0 || i < len(chunks)-1 && rows != size {
			t.Fatalf("chunk %d holds %d rows", i, rows)
		}
		got = append(got, raw...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the chunks' rows differ from the file's")
	}
	again, err := ds.chunks(path, size)
	if err != nil || len(again) != len(chunks) || again[0] != chunks[0] {
		t.Fatalf("cut twice: %v, %v", again, err)
	}
}

// TestCopyChunksKeepEveryRowInOrder: rowcost's spans COPYs are binary COPY
// streams of at most n rows that together hold the stream's rows, in order,
// and a stream that is not one is refused.
func TestCopyChunksKeepEveryRowInOrder(t *testing.T) {
	ds, err := buildDataset(t.TempDir(), 2, 300, 1)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(ds.files[0][tables.IdxSpans])
	if err != nil {
		t.Fatal(err)
	}
	fields := len(benchLayout.Table(tables.IdxSpans).Columns)
	body := func(b []byte) []byte { return b[len(copyHeader) : len(b)-len(copyTrailer)] }
	whole, err := copyChunks(data, fields, 0)
	if err != nil || len(whole) != 1 || !bytes.Equal(whole[0], data) {
		t.Fatalf("n = 0 must keep the stream whole: %d streams, %v", len(whole), err)
	}
	rows, err := pgcopy.CheckTuples(body(data), fields)
	if err != nil || rows < 20 {
		t.Fatalf("%d spans in the file: %v", rows, err)
	}
	const size = 7
	chunks, err := copyChunks(data, fields, size)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != (rows+size-1)/size {
		t.Fatalf("%d chunks of %d rows for %d rows", len(chunks), size, rows)
	}
	var got []byte
	for i, c := range chunks {
		if !bytes.HasPrefix(c, copyHeader) || !bytes.HasSuffix(c, copyTrailer) {
			t.Fatalf("chunk %d is not a binary COPY stream", i)
		}
		n, err := pgcopy.CheckTuples(body(c), fields)
		if err != nil || n == 0 || n > size || i < len(chunks)-1 && n != size {
			t.Fatalf("chunk %d holds %d rows: %v", i, n, err)
		}
		got = append(got, body(c)...)
	}
	if !bytes.Equal(got, body(data)) {
		t.Fatal("the chunks' rows differ from the stream's")
	}
	if _, err := copyChunks(data, fields+1, size); err == nil {
		t.Fatal("rows of another field count were cut")
	}
	if _, err := copyChunks(data[:len(data)-len(copyTrailer)-3], fields, size); err == nil {
		t.Fatal("a cut row was cut into chunks")
	}
}
