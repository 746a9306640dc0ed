package pgwrite

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestWorkMem: every write's transaction runs with the work_mem SetWorkMem
// gives, as a trigger in it sees it: a batch, a batch whose bad row sends it
// through isolation, and stream entries; nothing of it stays on the pool's
// connections; "" keeps the server's; a value that is not a memory size is
// refused and changes nothing.
func TestWorkMem(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	s := pgx.Identifier{name}.Sanitize()
	_, err := pool.Exec(ctx, `CREATE TABLE `+s+`.seen (n bigserial, work_mem text);
CREATE FUNCTION `+s+`.see() RETURNS trigger LANGUAGE plpgsql
AS $$BEGIN INSERT INTO `+s+`.seen (work_mem) VALUES (current_setting('work_mem')); RETURN NULL; END$$;
CREATE TRIGGER see AFTER INSERT ON `+s+`.logs_rows FOR EACH STATEMENT EXECUTE FUNCTION `+s+`.see()`)
	require.NoError(t, err)
	var server string
	require.NoError(t, pool.QueryRow(ctx, "SHOW work_mem").Scan(&server))
	want := "48MB"
	if server == want {
		want = "40MB"
	}
	seen := func() []string {
		t.Helper()
		r, err := pool.Query(ctx, "SELECT work_mem FROM "+s+".seen ORDER BY n")
		require.NoError(t, err)
		out, err := pgx.CollectRows(r, pgx.RowTo[string])
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "TRUNCATE "+s+".seen")
		require.NoError(t, err)
		return out
	}

	w := NewWriter(pool, name)
	require.NoError(t, w.SetWorkMem(want))
	var b rows.Batch
	b.AddLogs(logs(5))
	_, err = w.Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, []string{want}, seen(), "a batch")

	b.Reset()
	b.AddLogs(logs(10, 5))
	res, err := w.Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, []TableResult{{Table: "logs", Rows: 9, Rejected: 1}}, clearBytes(res))
	isolated := seen()
	require.NotEmpty(t, isolated)
	for _, v := range isolated {
		require.Equal(t, want, v, "the isolation's COPYs")
	}

	var st entry.Entries
	st.Reset(tables.DefaultLayout())
	require.NoError(t, st.Add(ent(t, func(b *rows.Batch) { b.AddLogs(logs(3)) })))
	_, err = w.WriteEntries(ctx, &st, &Ledger{Stream: "st", IDs: []string{"e1"}})
	require.NoError(t, err)
	require.Equal(t, []string{want}, seen(), "stream entries")

	// SET LOCAL: every connection the pool holds is back at the server's.
	var conns []*pgxpool.Conn
	for range pool.Stat().TotalConns() {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
		var v string
		require.NoError(t, c.QueryRow(ctx, "SHOW work_mem").Scan(&v))
		require.Equal(t, server, v, "a pooled connection after the writes")
	}
	for _, c := range conns {
		c.Release()
	}

	for _, bad := range []string{"64mb", "64 MB", "0", "-1", "64MB'; SET work_mem = '1GB", "1e3"} {
		require.Error(t, w.SetWorkMem(bad), "%q", bad)
	}
	b.Reset()
	b.AddLogs(logs(2))
	_, err = w.Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, []string{want}, seen(), "a refused value changes nothing")

	require.NoError(t, w.SetWorkMem(""))
	b.Reset()
	b.AddLogs(logs(2))
	_, err = w.Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, []string{server}, seen(), `"" keeps the server's`)
}
