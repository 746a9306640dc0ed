package postgrescopyexporter

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// modelTraces is uniqueTraces with a GenAI model on every span, which the
// default genai preset promotes to a column.
func modelTraces(req, spans int) ptrace.Traces {
	td := uniqueTraces(req, spans)
	ss := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	for i := 0; i < ss.Len(); i++ {
		ss.At(i).Attributes().PutStr("gen_ai.request.model", "model-x")
	}
	return td
}

// copyEntry encodes td as a stream entry of layout l, as enqueue does.
func copyEntry(t *testing.T, l *tables.Layout, td ptrace.Traces, compress bool) []byte {
	t.Helper()
	b := new(rows.Batch)
	b.SetLayout(l)
	b.AddTraces(td)
	ent, err := entry.Append(nil, b, compress)
	require.NoError(t, err)
	return ent
}

// damageBlock flips the last bit of entry e's S2 block, from 10 bytes before
// its end, that a reader of layout l refuses: a flipped bit in the block of
// repetitive rows can decode to the same rows (a copy from identical bytes),
// which is no damage.
func damageBlock(l *tables.Layout, e []byte) {
	for i := len(e) - 10; ; i-- {
		e[i] ^= 0x01
		b := new(rows.Batch)
		b.SetLayout(l)
		if entry.AddTo(b, e) != nil {
			return
		}
		e[i] ^= 0x01
	}
}

// Every entry a stream may hold is written or kept: an entry without a
// format (quarantined: no release writes one), entries of this replica's
// columns, entries of a replica without the promoted columns (written with
// its own column list), a corrupt entry (reported and acknowledged, so it
// cannot wedge the stream), the same compressed with S2, and an entry of a
// format from a newer release
// (left pending for a replica that reads it).
func TestRedisEntryFormats(t *testing.T) {
	cfg, schemaName := testConfig(t)
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	own, err := cfg.layout()
	require.NoError(t, err)
	require.NotEqual(t, tables.DefaultLayout().Descriptor(), own.Descriptor(), "the default config promotes columns")

	keys := coord.KeysFor(prefix, "traces")
	s := coord.NewStream(rdb, keys, coord.Bounds{}, "producer")
	require.NoError(t, s.EnsureGroup(ctx))
	const per = 5
	add := func(format string, payload []byte) {
		_, err := s.AddEntry(ctx, "", format, payload, per)
		require.NoError(t, err)
	}
	otlp, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(modelTraces(1, per))
	require.NoError(t, err)
	add("", otlp)
	add(entry.Format, copyEntry(t, own, modelTraces(2, per), false))
	add(entry.Format, copyEntry(t, tables.DefaultLayout(), modelTraces(3, per), false))
	corrupt := copyEntry(t, own, modelTraces(4, per), false)
	add(entry.Format, corrupt[:len(corrupt)-3])
	add("copy9", []byte("from the future"))
	add(entry.Format, copyEntry(t, own, modelTraces(5, per), false))
	add(entry.Format, copyEntry(t, own, modelTraces(6, per), true))
	add(entry.Format, copyEntry(t, tables.DefaultLayout(), modelTraces(7, per), true))
	bad := copyEntry(t, own, modelTraces(8, per), true)
	damageBlock(own, bad)
	add(entry.Format, bad)

	_, tel := startTraces(t, withRedis(cfg, prefix, "formats"))
	pool := pgtest.Pool(t)
	require.Eventually(t, func() bool { return streamLen(t, rdb, prefix) == 1 }, 20*time.Second, 50*time.Millisecond,
		"every entry but the newer format's is acknowledged and deleted")

	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	total, distinct := countSpans(t, q, schemaName)
	assert.EqualValues(t, 5*per, total, "requests 2, 3, 5, 6 and 7")
	assert.EqualValues(t, 5*per, distinct)
	var promoted, null int64
	require.NoError(t, q(ctx, `SELECT count(*) FILTER (WHERE gen_ai_request_model = 'model-x'),
		count(*) FILTER (WHERE gen_ai_request_model IS NULL) FROM "`+schemaName+`".spans`, &promoted, &null))
	assert.EqualValues(t, 3*per, promoted, "own-layout entries get the promoted column")
	assert.EqualValues(t, 2*per, null, "the other layout's entries are written with their own columns")
	assert.EqualValues(t, 3, counterSum(t, tel, "otelcol_postgrescopy_redis_undecodable_entries"), "the formatless, the corrupt and the damaged entry")

	left, err := rdb.XRange(ctx, keys.Stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, left, 1)
	assert.Equal(t, "copy9", left[0].Values["f"])
	pending, err := rdb.XPending(ctx, keys.Stream, keys.Group).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, pending.Count, "the newer format's entry stays pending, not acknowledged")
}

// Entries are streamed into COPY without a batch; a damaged one among them
// (a flipped byte in its compressed rows, headers intact) is found as its
// rows stream, the write is rolled back and done again through a batch,
// which skips the damaged entry: the others are written exactly once.
func TestRedisDamagedEntryWhileStreaming(t *testing.T) {
	cfg, schemaName := testConfig(t)
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	own, err := cfg.layout()
	require.NoError(t, err)
	keys := coord.KeysFor(prefix, "traces")
	s := coord.NewStream(rdb, keys, coord.Bounds{}, "producer")
	require.NoError(t, s.EnsureGroup(ctx))
	const per = 5
	for req := 1; req <= 4; req++ {
		e := copyEntry(t, own, modelTraces(req, per), true)
		if req == 3 {
			damageBlock(own, e)
		}
		_, err := s.AddEntry(ctx, "", entry.Format, e, per)
		require.NoError(t, err)
	}

	_, tel := startTraces(t, withRedis(cfg, prefix, "damaged"))
	pool := pgtest.Pool(t)
	require.Eventually(t, func() bool { return streamLen(t, rdb, prefix) == 0 }, 20*time.Second, 50*time.Millisecond)
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	total, distinct := countSpans(t, q, schemaName)
	assert.EqualValues(t, 3*per, total, "requests 1, 2 and 4")
	assert.EqualValues(t, 3*per, distinct)
	assert.EqualValues(t, 1, counterSum(t, tel, "otelcol_postgrescopy_redis_undecodable_entries"))
	assert.EqualValues(t, 1, counterWhere(t, tel, "otelcol_postgrescopy_batches", "outcome", "damaged"))
}

// A row PostgreSQL refuses inside an entry (here: span_attributes that are
// not JSON, in a well-shaped tuple) goes to the rejects table with its
// columns, and the entry's other rows are written: isolation works on rows
// that came through Redis as on rows encoded in place.
func TestRedisEntryRefusedRowGoesToRejects(t *testing.T) {
	cfg, schemaName := testConfig(t)
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	own, err := cfg.layout()
	require.NoError(t, err)
	ent := copyEntry(t, own, modelTraces(9, 3), false)
	// Break the second span's attributes: `"payload":` → `"payload"!`.
	key := []byte(`"payload":`)
	first := bytes.Index(ent, key)
	require.Positive(t, first)
	second := bytes.Index(ent[first+1:], key)
	require.Positive(t, second)
	ent[first+1+second+len(key)-1] = '!'

	keys := coord.KeysFor(prefix, "traces")
	s := coord.NewStream(rdb, keys, coord.Bounds{}, "producer")
	require.NoError(t, s.EnsureGroup(ctx))
	_, err = s.AddEntry(ctx, "", entry.Format, ent, 3)
	require.NoError(t, err)

	_, tel := startTraces(t, withRedis(cfg, prefix, "refused"))
	pool := pgtest.Pool(t)
	require.Eventually(t, func() bool { return streamLen(t, rdb, prefix) == 0 }, 20*time.Second, 50*time.Millisecond)
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	total, _ := countSpans(t, q, schemaName)
	assert.EqualValues(t, 2, total, "the entry's other rows are written")
	var n int
	var code, spanID string
	require.NoError(t, q(ctx, `SELECT count(*), min(sqlstate), min(row_json->>'span_id') FROM "`+schemaName+`".rejects WHERE table_name = 'spans'`, &n, &code, &spanID))
	assert.Equal(t, 1, n)
	assert.Equal(t, "22P02", code, "invalid_text_representation")
	assert.NotEmpty(t, spanID, "the refused row is rendered with its columns")
	assert.EqualValues(t, 1, counterSum(t, tel, "otelcol_postgrescopy_rejected_rows"))
	// The streamed write was refused on data, then the batch write isolated
	// the row.
	assert.EqualValues(t, 1, counterWhere(t, tel, "otelcol_postgrescopy_batches", "outcome", "data"))
	assert.EqualValues(t, 1, counterWhere(t, tel, "otelcol_postgrescopy_batches", "outcome", "written"))
}
