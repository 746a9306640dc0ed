package postgrescopyexporter

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.uber.org/zap/zapcore"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// quarantineRow is one row of the quarantine table.
type quarantineRow struct {
	stream, entryID, key, format, reason string
	payload                              []byte
	inLedger                             bool
}

func readQuarantine(t *testing.T, schemaName string) map[string]quarantineRow {
	t.Helper()
	pool := pgtest.Pool(t)
	rs, err := pool.Query(context.Background(), `SELECT q.stream, q.entry_id, q.ledger_key, q.format, q.reason, q.payload,
		EXISTS (SELECT 1 FROM "`+schemaName+`".ledger l WHERE l.stream = q.stream AND l.entry_id = q.ledger_key)
		FROM "`+schemaName+`".quarantine q`)
	require.NoError(t, err)
	defer rs.Close()
	out := map[string]quarantineRow{}
	for rs.Next() {
		var r quarantineRow
		require.NoError(t, rs.Scan(&r.stream, &r.entryID, &r.key, &r.format, &r.reason, &r.payload, &r.inLedger))
		out[r.entryID] = r
	}
	require.NoError(t, rs.Err())
	return out
}

// s2Block returns the length of the S2 block that ends e, an entry of its
// rows' contexts then one compressed table: index, codec, rows, size, block
// length, checksum, block.
func s2Block(t *testing.T, e []byte) int {
	t.Helper()
	desc, err := entry.Descriptor(e)
	require.NoError(t, err)
	r := e[binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(len(desc)))+len(desc):]
	if r[0] == tables.IdxContexts {
		// Skip the dictionary's record, which comes first.
		codec := r[1]
		r = r[2:]
		_, n := binary.Uvarint(r)
		r = r[n:]
		size, n := binary.Uvarint(r)
		r = r[n:]
		if codec == 1 {
			clen, n := binary.Uvarint(r)
			r = r[n+8:]
			size = clen
		}
		r = r[size:]
	}
	require.EqualValues(t, 1, r[1], "compressed")
	r = r[2:]
	for range 2 { // rows, size
		_, n := binary.Uvarint(r)
		r = r[n:]
	}
	clen, n := binary.Uvarint(r)
	require.Len(t, r[n+8:], int(clen), "one table")
	return int(clen)
}

// A damaged entry among good ones (headers intact: a flipped byte in its S2
// block, or in its checksum) is not deleted: it is stored, bytes intact and
// with the reason, in the quarantine table, in the transaction that writes
// the good entries' rows and the ledger, and only then acknowledged. An
// entry of nothing but damage is quarantined alone.
func TestRedisDamagedEntryIsQuarantined(t *testing.T) {
	cfg, schemaName := testConfig(t)
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	own, err := cfg.layout()
	require.NoError(t, err)
	keys := coord.KeysFor(prefix, "traces")
	s := coord.NewStream(rdb, keys, coord.Bounds{}, "producer")
	require.NoError(t, s.EnsureGroup(ctx))
	const per = 5
	damaged := map[string][]byte{} // stream id -> payload
	add := func(e []byte) string {
		id, err := s.AddEntry(ctx, "", entry.Format, e, per)
		require.NoError(t, err)
		return id
	}
	for req := 1; req <= 5; req++ {
		e := copyEntry(t, own, modelTraces(req, per), true)
		block := s2Block(t, e)
		switch req {
		case 2:
			damageBlock(own, e) // inside the S2 block
		case 4:
			e[len(e)-block-3] ^= 0x40 // inside the checksum, the 8 bytes before it
		}
		id := add(e)
		if req == 2 || req == 4 {
			damaged[id] = append([]byte(nil), e...)
		}
	}

	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	set, logs := observedSettings()
	set.TelemetrySettings.MeterProvider = tel.NewTelemetrySettings().MeterProvider
	te, err := NewFactory().CreateTraces(ctx, set, withRedis(cfg, prefix, "quarantine"))
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background())) })
	pool := pgtest.Pool(t)
	require.Eventually(t, func() bool { return streamLen(t, rdb, prefix) == 0 }, 20*time.Second, 50*time.Millisecond,
		"every entry is acknowledged and deleted")
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	total, distinct := countSpans(t, q, schemaName)
	assert.EqualValues(t, 3*per, total, "requests 1, 3 and 5")
	assert.EqualValues(t, 3*per, distinct)

	got := readQuarantine(t, schemaName)
	require.Len(t, got, len(damaged))
	for id, payload := range damaged {
		r, ok := got[id]
		require.True(t, ok, "entry %s is quarantined", id)
		assert.Equal(t, keys.Stream, r.stream)
		assert.Equal(t, entry.Format, r.format)
		assert.Equal(t, payload, r.payload, "entry %s: its bytes, intact", id)
		assert.Contains(t, r.reason, "malformed entry")
		assert.True(t, r.inLedger, "entry %s: its ledger key %q is committed with it", id, r.key)
	}
	assert.EqualValues(t, 2, counterSum(t, tel, "otelcol_postgrescopy_redis_undecodable_entries"))
	// Logged at Error with the stream, the entry and the reason, once each,
	// and never with the payload.
	logged := logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("quarantine").All()
	require.Len(t, logged, len(damaged))
	for _, l := range logged {
		fields := l.ContextMap()
		assert.Equal(t, keys.Stream, fields["stream"])
		assert.Contains(t, damaged, fields["entry"])
		assert.Contains(t, fields["reason"], "malformed entry")
		for k, v := range fields {
			if s, ok := v.(string); ok {
				assert.NotContains(t, s, string(damaged[fields["entry"].(string)][:32]), "field %s holds payload bytes", k)
			}
		}
	}

	// A flush of damage alone: nothing to copy, the quarantine row commits.
	bad := copyEntry(t, own, modelTraces(6, per), false)
	bad = bad[:len(bad)-3]
	id := add(bad)
	require.Eventually(t, func() bool { return streamLen(t, rdb, prefix) == 0 }, 20*time.Second, 50*time.Millisecond)
	got = readQuarantine(t, schemaName)
	require.Len(t, got, 3)
	assert.Equal(t, bad, got[id].payload)
	assert.Contains(t, got[id].reason, "cut table")
	total, _ = countSpans(t, q, schemaName)
	assert.EqualValues(t, 3*per, total)
	assert.EqualValues(t, 3, counterSum(t, tel, "otelcol_postgrescopy_redis_undecodable_entries"))
}

// The repro end to end: 3 requests of 10 spans, each span with the
// same 60 KB periodic attribute, compress past the reader's ratio bound with
// S2. They were refused as damaged and deleted (3 acknowledged, 0 stored);
// every span is stored now, and nothing is quarantined.
func TestRedisHighlyCompressibleRequestsAreStored(t *testing.T) {
	cfg, schemaName := testConfig(t)
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	te, tel := startTraces(t, withRedis(cfg, prefix, "compressible"))
	blob := strings.Repeat("0123456789abcdef", 60<<10/16)
	for req := 1; req <= 3; req++ {
		td := uniqueTraces(req, 10)
		ss := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
		for i := 0; i < ss.Len(); i++ {
			ss.At(i).Attributes().PutStr("payload", blob)
		}
		require.NoError(t, te.ConsumeTraces(ctx, td))
	}
	pool := pgtest.Pool(t)
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	require.Eventually(t, func() bool {
		total, _ := countSpans(t, q, schemaName)
		return total == 30 && streamLen(t, rdb, prefix) == 0
	}, 20*time.Second, 50*time.Millisecond, "every span of the 3 requests is stored")
	_, distinct := countSpans(t, q, schemaName)
	assert.EqualValues(t, 30, distinct)
	var n int64
	require.NoError(t, q(ctx, `SELECT count(*) FROM "`+schemaName+`".spans WHERE length(span_attributes->>'payload') = `+strconv.Itoa(len(blob)), &n))
	assert.EqualValues(t, 30, n, "the attribute whole")
	assert.Empty(t, readQuarantine(t, schemaName))
	assert.Zero(t, counterSum(t, tel, "otelcol_postgrescopy_redis_undecodable_entries"))
}
