package pgcopy

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestMarker(t *testing.T) {
	for _, n := range []int{0, 9, 10, 99, 65536, 1 << 40} {
		m := AppendMarker(nil, n)
		require.Len(t, m, MarkerLen(n))
		require.True(t, strings.HasPrefix(string(m), "[postgrescopy: truncated from "))
	}
	require.Equal(t, "[postgrescopy: truncated from 12345 bytes]", string(AppendMarker(nil, 12345)))
}

func TestAppendCleanLimit(t *testing.T) {
	const limit = 64
	for _, tc := range []struct {
		name, in  string
		keep      string // the kept prefix; "" with cut false means in unchanged
		truncated bool
	}{
		{name: "short", in: "abc"},
		{name: "at the limit", in: strings.Repeat("a", limit)},
		{name: "over by one", in: strings.Repeat("a", limit+1), keep: strings.Repeat("a", limit-MarkerLen(limit+1)), truncated: true},
		// 20 'é' is 40 bytes, 30 is 60 bytes: cut between characters.
		{name: "never splits a character", in: strings.Repeat("é", 40), keep: strings.Repeat("é", 12), truncated: true},
		// 30 NULs are 30 bytes in but 90 out: the bound is on what is stored.
		{name: "bound after cleaning", in: strings.Repeat("\x00", 30), keep: strings.Repeat("\uFFFD", 8), truncated: true},
		{name: "cut at the limit inside a character", in: strings.Repeat("a", limit-1) + "é" + "tail", keep: strings.Repeat("a", limit-MarkerLen(limit+4)), truncated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(AppendCleanLimit([]byte("pre:"), tc.in, limit))
			require.True(t, strings.HasPrefix(got, "pre:"))
			got = got[4:]
			require.True(t, utf8.ValidString(got))
			require.LessOrEqual(t, len(got), limit)
			if !tc.truncated {
				require.Equal(t, tc.in, got)
				return
			}
			require.Equal(t, tc.keep+string(AppendMarker(nil, len(tc.in))), got)
		})
	}
	// Below the marker's length only the marker remains.
	require.Equal(t, string(AppendMarker(nil, 100)), string(AppendCleanLimit(nil, strings.Repeat("a", 100), 10)))
}

func TestRuneCut(t *testing.T) {
	b := []byte("aé🙂") // 1 + 2 + 4 bytes
	for n, want := range []int{0, 1, 1, 3, 3, 3, 3, 7, 7} {
		require.Equal(t, want, RuneCut(b, n), "n=%d", n)
	}
	require.Zero(t, RuneCut(b, -1))
}

func TestTextMaxValue(t *testing.T) {
	var e Encoder
	e.SetMaxValue(64)
	e.BeginRow(2)
	e.Text(strings.Repeat("x", 1000))
	e.TextOrNull("short")
	e.Reset() // keeps the limit
	e.BeginRow(1)
	e.Text(strings.Repeat("x", 1000))
	r := parse(t, mustBytes(t, &e))[0]
	require.Len(t, r[0], 64)
	require.True(t, strings.HasSuffix(string(r[0]), "[postgrescopy: truncated from 1000 bytes]"))
}

func TestTuplesAndRows(t *testing.T) {
	var e Encoder
	for i := range 5 {
		e.BeginRow(2)
		e.Int32(int32(i))
		e.Text(strings.Repeat("v", i))
	}
	whole := bytes.Clone(mustBytes(t, &e))
	all, err := io.ReadAll(NewReader(e.Tuples(0, 5)))
	require.NoError(t, err)
	require.Equal(t, whole, all, "all tuples between header and trailer are the stream")

	// Rows 1 and 3 alone: a stream of two runs.
	sub, err := io.ReadAll(NewReader(e.Tuples(1, 2), e.Tuples(3, 4)))
	require.NoError(t, err)
	rows := parse(t, sub)
	require.Len(t, rows, 2)
	require.Equal(t, []byte{0, 0, 0, 1}, rows[0][0])
	require.Equal(t, []byte{0, 0, 0, 3}, rows[1][0])
	require.Nil(t, e.Tuples(2, 2))

	fields, ok := SplitRow(nil, e.Tuples(4, 5))
	require.True(t, ok)
	require.Equal(t, [][]byte{{0, 0, 0, 4}, []byte("vvvv")}, fields)
	_, ok = SplitRow(nil, e.Tuples(3, 5))
	require.False(t, ok, "two rows are not one")
	_, ok = SplitRow(nil, e.Tuples(4, 5)[:7])
	require.False(t, ok, "a cut row")

	require.Equal(t, e.Tuples(4, 5), e.LastRow())
	row := binaryRow(AppendField(nil, []byte{0, 0, 0, 9}), AppendField(nil, nil))
	e.ReplaceLastRow(row)
	rows = parse(t, mustBytes(t, &e))
	require.Len(t, rows, 5)
	require.Equal(t, [][]byte{{0, 0, 0, 9}, nil}, rows[4])
	for i := range 4 {
		require.Equal(t, [][]byte{{0, 0, 0, byte(i)}, bytes.Repeat([]byte("v"), i)}, rows[i], "rows before are untouched")
	}
}

func binaryRow(fields ...[]byte) []byte {
	row := []byte{0, byte(len(fields))}
	for _, f := range fields {
		row = append(row, f...)
	}
	return row
}
