package pgwrite

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// Quarantined entries listed in a Ledger are stored with the batch, in its
// transaction: on the fast path, on the isolating one (a refused row), and
// with nothing else to write; a batch whose ledger key is committed already
// stores nothing again. Payloads are kept byte for byte (every byte value),
// and text PostgreSQL would refuse is cleaned rather than failing the batch.
func TestQuarantine(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	w := NewWriter(pool, name)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	quarantined := func(id string, payload []byte) Quarantined {
		return Quarantined{Stream: "st", EntryID: id, LedgerKey: "k-" + id, Format: "copy1", Reason: "rows: malformed entry: cut table", Payload: payload}
	}
	type row struct {
		stream, key, format, reason string
		payload                     []byte
	}
	read := func() map[string]row {
		rs, err := pool.Query(ctx, "SELECT entry_id, stream, ledger_key, format, reason, payload FROM "+pgx.Identifier{name, QuarantineTable}.Sanitize())
		require.NoError(t, err)
		defer rs.Close()
		out := map[string]row{}
		for rs.Next() {
			var id string
			var r row
			require.NoError(t, rs.Scan(&id, &r.stream, &r.key, &r.format, &r.reason, &r.payload))
			out[id] = r
		}
		require.NoError(t, rs.Err())
		return out
	}

	// The fast path.
	var b rows.Batch
	b.AddTraces(spans(10))
	_, err := w.WriteLedgered(ctx, &b, &Ledger{Stream: "st", IDs: []string{"k-1", "k-q1"}, Quarantine: []Quarantined{quarantined("q1", all)}})
	require.NoError(t, err)
	got := read()
	require.Equal(t, row{"st", "k-q1", "copy1", "rows: malformed entry: cut table", all}, got["q1"])
	require.EqualValues(t, 10, pgtest.Count(t, pool, name, "spans"))

	// The same ledger key again: nothing is written, the quarantine included.
	_, err = w.WriteLedgered(ctx, &b, &Ledger{Stream: "st", IDs: []string{"k-q1"}, Quarantine: []Quarantined{quarantined("q1", all)}})
	require.ErrorIs(t, err, ErrAlreadyCommitted)
	require.Len(t, read(), 1)

	// A refused row: the isolating transaction stores the quarantine once.
	b.Reset()
	b.AddTraces(spans(10, 3))
	_, err = w.WriteLedgered(ctx, &b, &Ledger{Stream: "st", IDs: []string{"k-2", "k-q2"}, Quarantine: []Quarantined{quarantined("q2", []byte("x"))}})
	require.NoError(t, err)
	require.Len(t, b.Rejects(), 1)
	require.Len(t, read(), 2)
	require.Equal(t, []byte("x"), read()["q2"].payload)

	// Nothing but quarantine, with text PostgreSQL refuses as it is.
	b.Reset()
	bad := quarantined("q3", nil)
	bad.Format = "co\x00py\xff"
	_, err = w.WriteLedgered(ctx, &b, &Ledger{Stream: "st", IDs: []string{"k-q3"}, Quarantine: []Quarantined{bad}})
	require.NoError(t, err)
	got = read()
	require.Len(t, got, 3)
	require.Equal(t, "co\uFFFDpy\uFFFD", got["q3"].format)
	require.Empty(t, got["q3"].payload)
	require.NotNil(t, got["q3"].payload, "an empty payload, not NULL")
	committed, err := w.Committed(ctx, "st", []string{"k-q1", "k-q2", "k-q3"})
	require.NoError(t, err)
	require.Len(t, committed, 3, "each quarantined entry's ledger key is committed with it")
}
