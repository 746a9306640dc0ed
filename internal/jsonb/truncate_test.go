package jsonb

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
)

// topType is the first byte of a document, or 'n' for a scalar.
func topType(doc []byte) byte {
	doc = bytes.TrimLeft(doc, " \t\r\n")
	if len(doc) > 0 && (doc[0] == '{' || doc[0] == '[' || doc[0] == '"') {
		return doc[0]
	}
	return 'n'
}

func TestTruncate(t *testing.T) {
	doc := `{"a":"hello world, a long value","b":[1,2,3,{"c":"` + strings.Repeat("d", 200) + `"}],"z":true}`
	n := strconv.Itoa(len(doc))
	for _, tc := range []struct {
		name, doc string
		limit     int
		want      string
	}{
		{"fits", `{"a":1}`, 7, `{"a":1}`},
		{"whole members only", doc, 80,
			`{"a":"hello world, a long value","[postgrescopy: truncated]":` + n + `}`},
		{"nothing kept but the marker", doc, 40, `{"[postgrescopy: truncated]":` + n + `}`},
		{"cut inside a nested string marks it and the top level", doc, 160,
			`{"a":"hello world, a long value","b":[1,2,3,{"c":"` + strings.Repeat("d", 34) +
				`[postgrescopy: truncated from ` + n + ` bytes]"}],"[postgrescopy: truncated]":` + n + `}`},
		{"array", `[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25]`, 60,
			`[1,2,3,4,5,6,7,8,"[postgrescopy: truncated from 67 bytes]"]`},
		{"string", `"` + strings.Repeat("é", 40) + `"`, 60,
			`"` + strings.Repeat("é", 9) + `[postgrescopy: truncated from 82 bytes]"`},
		{"never splits an escape", `"` + strings.Repeat(`\n`, 30) + `"`, 50,
			`"\n\n\n\n[postgrescopy: truncated from 62 bytes]"`},
		{"too small for a marker", doc, 10, `{}`},
		{"scalar", `123456789012345678901234567890`, 10, `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Truncate([]byte("pre:"), []byte(tc.doc), tc.limit)
			require.Equal(t, "pre:"+tc.want, string(got))
			require.True(t, json.Valid(got[4:]))
			if tc.limit >= 40 {
				require.LessOrEqual(t, len(got)-4, tc.limit)
			}
		})
	}
}

func TestTruncateKeepsSurrogatePairs(t *testing.T) {
	// A lone high surrogate is valid for Go but refused by jsonb.
	doc := []byte(`["` + strings.Repeat(`\ud83d\ude00`, 10) + `"]`)
	for limit := 40; limit < len(doc); limit++ {
		got := string(Truncate(nil, doc, limit))
		require.True(t, json.Valid([]byte(got)), got)
		require.Equal(t, 0, strings.Count(got, `\ud83d`)-strings.Count(got, `\ud83d\ude00`), "limit %d: %s", limit, got)
	}
}

// TestTruncateEncoderOutput cuts real attribute maps at every limit.
func TestTruncateEncoderOutput(t *testing.T) {
	m := pcommon.NewMap()
	m.PutStr("s", "a \x00 b \xff \"q\" \\ \n é 🙂")
	m.PutInt("i", -42)
	m.PutDouble("d", 1.5)
	m.PutEmptyBytes("b").FromRaw([]byte{0, 1, 2, 0xff})
	inner := m.PutEmptyMap("m")
	inner.PutStr("k", strings.Repeat("v", 100))
	inner.PutEmptySlice("sl").AppendEmpty().SetStr("x")
	doc := AppendMap(nil, m)
	for limit := 0; limit <= len(doc)+1; limit++ {
		got := Truncate(nil, doc, limit)
		checkJSON(t, got)
		require.Equal(t, byte('{'), topType(got))
		if limit >= 40 {
			require.LessOrEqual(t, len(got), limit)
		}
		if limit >= len(doc) {
			require.Equal(t, doc, got)
		} else if limit >= 40 {
			require.Contains(t, string(got), `"`+TruncatedKey+`":`, "limit %d", limit)
		}
	}
}

// FuzzTruncate: any valid JSON document, cut to any limit of at least 64
// bytes, stays valid JSON of the same top-level type within the limit; other
// input never panics.
func FuzzTruncate(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x",{"b":null}],"c":"\u00e9\ud83d\ude00"}`, `[[[[]]]]`, `"abc\\"`, `1e5`, ` { "a" : [ 1 , 2 ] } `, `{"a`, `[`, `"\u`} {
		f.Add([]byte(s), uint16(64))
	}
	f.Fuzz(func(t *testing.T, doc []byte, limit uint16) {
		got := Truncate(nil, doc, int(limit))
		if !json.Valid(doc) {
			return
		}
		if int(limit) >= len(doc) {
			require.Equal(t, doc, got)
			return
		}
		require.True(t, json.Valid(got), "%q cut to %d: %q", doc, limit, got)
		if limit >= 64 {
			require.LessOrEqual(t, len(got), int(limit))
			if tt := topType(doc); tt != 'n' {
				require.Equal(t, tt, topType(got))
			}
		}
	})
}

func TestEncoderMaxValue(t *testing.T) {
	e := Encoder{MaxValue: 64}
	long := strings.Repeat("x", 100)
	unmarshal := func(b []byte) string {
		var s string
		require.NoError(t, json.Unmarshal(b, &s))
		return s
	}

	got := unmarshal(e.AppendString(nil, long))
	require.Len(t, got, 64)
	require.Equal(t, strings.Repeat("x", 64-pgcopy.MarkerLen(100))+"[postgrescopy: truncated from 100 bytes]", got)

	require.Equal(t, `"`+strings.Repeat("x", 64)+`"`, string(e.AppendString(nil, strings.Repeat("x", 64))), "at the limit: kept whole")

	// The bound is on the stored text: 30 NULs become 90 bytes of U+FFFD.
	got = unmarshal(e.AppendString(nil, strings.Repeat("\x00", 30)))
	require.LessOrEqual(t, len(got), 64)
	require.True(t, strings.HasSuffix(got, "[postgrescopy: truncated from 30 bytes]"), got)
	require.True(t, strings.HasPrefix(got, "\uFFFD\uFFFD"), got)

	// Keys are bounded too; maps and slices pass the bound down.
	m := pcommon.NewMap()
	m.PutStr(long, "v")
	m.PutEmptySlice("sl").AppendEmpty().SetStr(long)
	out := e.AppendMap(nil, m)
	checkJSON(t, out)
	var back map[string]any
	require.NoError(t, json.Unmarshal(out, &back))
	for k := range back {
		require.LessOrEqual(t, len(k), 64)
	}
	require.LessOrEqual(t, len(back["sl"].([]any)[0].(string)), 64)

	// Bytes: the base64 text is bounded, cut on a 4-character group.
	v := pcommon.NewValueBytes()
	v.Bytes().FromRaw(bytes.Repeat([]byte{0xab}, 300))
	got = unmarshal(e.AppendValue(nil, v))
	require.LessOrEqual(t, len(got), 64)
	require.True(t, strings.HasSuffix(got, "[postgrescopy: truncated from 400 bytes]"), got)
	require.Zero(t, (len(got)-pgcopy.MarkerLen(400))%4)

	// The zero Encoder does not bound.
	require.Len(t, unmarshal(Encoder{}.AppendString(nil, long)), 100)
}
