package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/jsonb"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestSplitLongReadsBackTheSameJSONB: the split variants' rows, loaded by
// binary COPY, give back each row's jsonb with `kept || jsonb_object(long)`,
// the expression a view over them would read; strings at or under the limit,
// and values other than strings, stay in the jsonb.
func TestSplitLongReadsBackTheSameJSONB(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	long := strings.Repeat(`é "quoted" \ back\slash `, 20)
	docs := []string{
		`{}`,
		`{"a": 1, "b": "short"}`,
		`{"msg": "` + strings.ReplaceAll(strings.ReplaceAll(long, `\`, `\\`), `"`, `\"`) + `", "n": 2.5, "t": true}`,
		`{"x": "` + strings.Repeat("y", 64) + `", "z": "` + strings.Repeat("w", 65) + `", "arr": ["` + strings.Repeat("v", 100) + `"]}`,
		`{"nested": {"deep": "` + strings.Repeat("d", 200) + `"}, "tab\tkey": "` + strings.Repeat("\\u00e9\\n", 40) + `"}`,
	}
	const limit = 64
	var buf []byte
	buf = append(buf, copyHeader...)
	var splits int
	for _, d := range docs {
		field := append([]byte{1}, d...)
		kept, arr, err := splitLong(slices.Clone(field), limit)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if arr != nil {
			splits++
		}
		buf = binary.BigEndian.AppendUint16(buf, 3)
		buf = appendField(appendField(appendField(buf, kept), arr), field)
	}
	buf = append(buf, copyTrailer...)
	if splits != 3 {
		t.Fatalf("%d documents split, want 3 (the quoted text, the 65-byte string, the escaped one)", splits)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := copyIntoTemp(ctx, t, "split_check (kept jsonb, long text[], orig jsonb)", buf)
	r, err := conn.Query(ctx, `SELECT orig::text, CASE WHEN long IS NULL THEN kept ELSE kept || jsonb_object(long) END = orig,
		coalesce(cardinality(long), 0), (SELECT count(*) FROM jsonb_each_text(kept) e(k, v) WHERE jsonb_typeof(kept -> k) = 'string' AND octet_length(v) > $1)
		FROM split_check`, limit)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		orig      string
		same      bool
		n, inJSON int64
	}
	got, err := pgx.CollectRows(r, func(row pgx.CollectableRow) (res, error) {
		var x res
		err := row.Scan(&x.orig, &x.same, &x.n, &x.inJSON)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(docs) {
		t.Fatalf("%d rows, want %d", len(got), len(docs))
	}
	pairs := 0
	for _, x := range got {
		if !x.same {
			t.Errorf("%s: does not read back the same", x.orig)
		}
		if x.inJSON != 0 {
			t.Errorf("%s: %d strings over %d bytes left in the jsonb", x.orig, x.inJSON, limit)
		}
		pairs += int(x.n)
	}
	if pairs != 2*3 {
		t.Errorf("%d array elements, want 6 (three keys, three values)", pairs)
	}
}

// TestPairedMedian: each run's ratio to before's of the same run, the median
// of them; a slow run of before lowers only its own ratio.
func TestPairedMedian(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		cpu, before []time.Duration
		want        float64
	}{
		{ms(9, 12, 8), ms(10, 10, 10), -0.1},
		{ms(8, 16, 7, 9), ms(10, 20, 10, 10), -0.2},
		{ms(5), ms(10), -0.5},
	} {
		got := pairedMedian(c.cpu, c.before)
		if got == nil || *got < c.want-1e-9 || *got > c.want+1e-9 {
			t.Errorf("pairedMedian(%v, %v) = %v, want %v", c.cpu, c.before, got, c.want)
		}
	}
	if got := pairedMedian(ms(1, 2), nil); got != nil {
		t.Errorf("without before: %v, want nil", *got)
	}
}

// TestSplitKeysReadsBackTheSameJSONB: the content variant's text columns,
// put back with jsonb_build_object, give each row's jsonb again; a content
// key whose value is not a string stays in the jsonb.
func TestSplitKeysReadsBackTheSameJSONB(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	docs := []string{
		`{"a": 1}`,
		`{"gen_ai.input.messages": "[{\"role\": \"user\", \"parts\": [{\"content\": \"h\u00e9\"}]}]", "gen_ai.request.model": "m"}`,
		`{"gen_ai.output.messages": [{"role": "assistant"}], "gen_ai.tool.call.result": "ok\\n"}`,
	}
	keys := []string{"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.result"}
	buf := slices.Clone(copyHeader)
	for _, d := range docs {
		field := append([]byte{1}, d...)
		kept, vals, err := splitKeys(slices.Clone(field), keys)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		buf = binary.BigEndian.AppendUint16(buf, uint16(2+len(keys)))
		buf = appendField(appendField(buf, field), kept)
		for _, v := range vals {
			buf = appendField(buf, v)
		}
	}
	buf = append(buf, copyTrailer...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := copyIntoTemp(ctx, t, "keys_check (orig jsonb, kept jsonb, c1 text, c2 text, c3 text)", buf)
	var same, inColumns int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE kept || jsonb_strip_nulls(jsonb_build_object($1::text, c1, $2::text, c2, $3::text, c3)) = orig),
		count(c1) + count(c2) + count(c3) FROM keys_check`, keys[0], keys[1], keys[2]).Scan(&same, &inColumns); err != nil {
		t.Fatal(err)
	}
	if same != len(docs) {
		t.Errorf("%d of %d rows read back the same", same, len(docs))
	}
	if inColumns != 2 {
		t.Errorf("%d values in the text columns, want 2 (the messages string, the tool result; not the array)", inColumns)
	}
}

// copyIntoTemp makes the temporary table def on a connection of its own
// (released at the test's end) and loads the binary COPY stream buf into it.
func copyIntoTemp(ctx context.Context, t *testing.T, def string, buf []byte) *pgxpool.Conn {
	t.Helper()
	conn, err := pgtest.Pool(t).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(ctx, "CREATE TEMP TABLE "+def); err != nil {
		t.Fatal(err)
	}
	name, _, _ := strings.Cut(def, " ")
	if _, err := conn.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(buf), "COPY "+name+" FROM STDIN (FORMAT binary)"); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestMergeLongIsTheEarlierEncoding: the rowcost variants of schema 8 and
// earlier get the exporter's rows with their long strings merged back into
// the jsonb, byte for byte what the encoder wrote before schema 9 (keys in
// jsonb's order), so that they measure the storage they name.
func TestMergeLongIsTheEarlierEncoding(t *testing.T) {
	td := ptrace.NewTraces()
	s := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	a := s.Attributes()
	a.PutStr("gen_ai.input.messages", strings.Repeat(`[{"role":"user","content":"é \"q\" \\ `, 30))
	a.PutStr("zz", "short")
	a.PutInt("n", 3)
	a.PutStr("a.long\x00key", strings.Repeat("x\xff", 200))
	a.PutEmptySlice("list").AppendEmpty().SetStr(strings.Repeat("v", 400))
	var b rows.Batch
	b.AddTraces(td)
	lt := benchLayout.Table(tables.IdxSpans)
	fields, ok := pgcopy.SplitRow(nil, b.Tuples(tables.IdxSpans, 0, 1))
	if !ok {
		t.Fatal("row does not split")
	}
	longs := longColumns(lt)
	if len(longs) != 1 || fields[longs[0][1]] == nil {
		t.Fatalf("want the span's long strings apart: %v", longs)
	}
	if err := mergeLongFields(fields, longs); err != nil {
		t.Fatal(err)
	}
	want := append([]byte{1}, jsonb.AppendMap(nil, a)...)
	if !bytes.Equal(fields[longs[0][0]], want) || fields[longs[0][1]] != nil {
		t.Fatalf("merged\n%q\nwant\n%q", fields[longs[0][0]], want)
	}
}
