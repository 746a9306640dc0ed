package main

import (
	"bytes"
	"io"
	"testing"

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
