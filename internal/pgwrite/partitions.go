package pgwrite

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Partition routing. PostgreSQL 15 inserts the rows of a COPY into a
// partitioned table one at a time, without its multi-insert buffers, when
// the table has a trigger with a transition table: spans_rows has the AI
// spend capture trigger. A COPY into one of its partitions keeps the
// buffers and fires that partition's statement triggers instead of the
// parent's (schema version 8 gives every partition the same ones). So a
// batch whose rows all fall in one partition is copied straight into it,
// and one over several in one COPY per partition (Writer.plan).
//
// Only a table whose parent has such a trigger is routed (elsewhere COPY
// buffers through the parent already), and only into a plain partition
// named as postgrescopy_maintain names them (<table>_pYYYYMMDD_HHMI, its
// lower bound) that has exactly the parent's statement-level INSERT
// triggers (name, function, enabled), no row security, and that the role
// may insert into: anything else goes through the parent, as before.
//
// The partitions are listed from the catalog at most every partitionsTTL
// (before the write's transaction, on a connection of the pool),
// without reading their bounds: pg_get_expr locks the relation it deparses,
// and a partition locked by someone else (a VACUUM FULL of an old one) must
// not hold up writers that never touch it. In the write's transaction the
// partition picked is locked, as the COPY would lock it, and then read
// again with its bounds: the rows go into it only when it is still
// routable and its range holds them, which the locks keep true until the
// transaction ends (detaching or dropping a partition, or changing its
// triggers, waits for them). Otherwise they go through the parent. The
// claim travels in the pipeline that begins the transaction (flushtx.go),
// and reads the partition by the oids the list found.

// partitionsTTL is how long the partitions listed are used before the
// catalog is read again: maintenance makes a partition ahead of time, so a
// new one is routed to within this of its start.
const partitionsTTL = 30 * time.Second

// listSQL lists the routable partitions of the stored tables $2 of schema
// $1, whose first columns are $3: parent name and oid, partition name and
// oid. The checks on the parent's partition key are scalar subqueries, not
// joins: planning a join of every catalog read costs more than a flush's
// other statements take to run.
const listSQL = `
SELECT pr.relname, pr.oid, lf.relname, lf.oid
FROM pg_class pr
JOIN pg_inherits i ON i.inhparent = pr.oid AND NOT i.inhdetachpending
JOIN pg_class lf ON lf.oid = i.inhrelid
WHERE pr.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)
  AND pr.relname = ANY($2::text[]) AND pr.relkind = 'p' AND NOT pr.relrowsecurity
  AND lf.relkind = 'r' AND NOT lf.relrowsecurity
  AND (SELECT pt.partstrat = 'r' AND pt.partnatts = 1 AND ka.attname = ($3::text[])[array_position($2::text[], pr.relname::text)]
       FROM pg_partitioned_table pt JOIN pg_attribute ka ON ka.attrelid = pt.partrelid AND ka.attnum = pt.partattrs[0]
       WHERE pt.partrelid = pr.oid)
  AND EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = pr.oid AND t.tgnewtable IS NOT NULL)
  AND has_table_privilege(lf.oid, 'INSERT')
  AND ARRAY(SELECT (t.tgname, t.tgfoid, t.tgenabled)::text FROM pg_trigger t
            WHERE t.tgrelid = pr.oid AND NOT t.tgisinternal AND t.tgtype::integer & 5 = 4 ORDER BY 1)
    = ARRAY(SELECT (t.tgname, t.tgfoid, t.tgenabled)::text FROM pg_trigger t
            WHERE t.tgrelid = lf.oid AND NOT t.tgisinternal AND t.tgtype::integer & 5 = 4 ORDER BY 1)`

// claimSQL is the range of partition $2 (an oid, named $3) of stored table
// $1 (an oid) when it is still routable (no row otherwise): read once both
// are locked, by the oids the list found (the partition key it checked
// cannot change).
const claimSQL = `
SELECT b[1]::timestamptz, b[2]::timestamptz FROM (
SELECT regexp_match(pg_get_expr(lf.relpartbound, lf.oid), '^FOR VALUES FROM \(''([^'']+)''\) TO \(''([^'']+)''\)$') AS b
FROM pg_class lf
JOIN pg_inherits i ON i.inhrelid = lf.oid AND i.inhparent = $1::oid AND NOT i.inhdetachpending
JOIN pg_class pr ON pr.oid = $1::oid AND NOT pr.relrowsecurity
WHERE lf.oid = $2::oid AND lf.relname = $3 AND lf.relnamespace = pr.relnamespace
  AND lf.relkind = 'r' AND NOT lf.relrowsecurity
  AND EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = pr.oid AND t.tgnewtable IS NOT NULL)
  AND has_table_privilege(lf.oid, 'INSERT')
  AND ARRAY(SELECT (t.tgname, t.tgfoid, t.tgenabled)::text FROM pg_trigger t
            WHERE t.tgrelid = pr.oid AND NOT t.tgisinternal AND t.tgtype::integer & 5 = 4 ORDER BY 1)
    = ARRAY(SELECT (t.tgname, t.tgfoid, t.tgenabled)::text FROM pg_trigger t
            WHERE t.tgrelid = lf.oid AND NOT t.tgisinternal AND t.tgtype::integer & 5 = 4 ORDER BY 1)) p
WHERE b[1] !~ 'infinity' AND b[2] !~ 'infinity'`

// partition is one routable partition, with the lower bound its name gives
// (microseconds since 2000).
type partition struct {
	name string
	lo   int64
	// oid and parent are the partition's and its stored table's oids as
	// listed: the claim checks the partition by them.
	oid, parent uint32
}

// partitions is a writer's routable partitions, per stored table.
type partitions struct {
	schema  string
	parents []string // stored tables of the layout, by table index ("" for one not routed)
	keys    []string // their first column

	mu      sync.Mutex
	byTable map[string][]partition // sorted by lo
	read    time.Time              // when byTable was read; zero: to be read
	reading bool
	done    chan struct{} // closed when the read in progress ends
	listed  bool          // a read succeeded once
}

func newPartitions(schemaName string, layout *tables.Layout) *partitions {
	p := &partitions{schema: schemaName}
	for i := range tables.NumSignalTables {
		t := layout.Table(i)
		if len(t.Kinds) == 0 || t.Kinds[0] != tables.KindTimestamptz {
			continue
		}
		p.parents = append(p.parents, t.Store)
		p.keys = append(p.keys, t.Columns[0])
	}
	return p
}

// stale makes the next write list the partitions again.
func (p *partitions) stale() {
	p.mu.Lock()
	p.read = time.Time{}
	p.mu.Unlock()
}

// refresh lists the partitions again when what was listed is older than
// partitionsTTL: through pool, before the write's transaction, so that
// listing them can never fail a write. After an error (a server whose
// catalog lacks a column the list reads) the previous list is kept, none
// at first, until the next refresh. Until a first list succeeded, a write
// waits for the one in progress rather than go through the parent tables:
// the first flushes of every signal start together, and a COPY through
// spans_rows costs PostgreSQL much more per row than one into a partition.
func (p *partitions) refresh(ctx context.Context, pool *pgxpool.Pool) {
	p.mu.Lock()
	if p.reading {
		done, wait := p.done, !p.listed
		p.mu.Unlock()
		if wait {
			select {
			case <-done:
			case <-ctx.Done():
			}
		}
		return
	}
	if time.Since(p.read) <= partitionsTTL {
		p.mu.Unlock()
		return
	}
	p.reading = true
	done := make(chan struct{})
	p.done = done
	p.mu.Unlock()
	byTable, err := p.load(ctx, pool)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reading, p.read = false, time.Now()
	if err == nil {
		p.byTable, p.listed = byTable, true
	}
	close(done)
}

// of returns the routable partitions of store listed last, sorted.
func (p *partitions) of(store string) []partition {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byTable[store]
}

// partitionIndex is the index in parts (sorted) of the partition whose
// lower bound is the greatest at or before v, the one that may hold it; -1
// when none is.
func partitionIndex(parts []partition, v int64) int {
	return sort.Search(len(parts), func(k int) bool { return parts[k].lo > v }) - 1
}

// load lists the routable partitions, per stored table, sorted by lower
// bound; those not named as maintenance names them are left out.
func (p *partitions) load(ctx context.Context, pool *pgxpool.Pool) (map[string][]partition, error) {
	rows, err := pool.Query(ctx, listSQL, p.schema, p.parents, p.keys)
	if err != nil {
		return nil, fmt.Errorf("list the partitions of schema %q: %w", p.schema, err)
	}
	out := map[string][]partition{}
	var parent, name string
	var parentOID, oid uint32
	_, err = pgx.ForEachRow(rows, []any{&parent, &parentOID, &name, &oid}, func() error {
		if lo, ok := partitionStart(parent, name); ok {
			out[parent] = append(out[parent], partition{name: name, lo: lo, oid: oid, parent: parentOID})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the partitions of schema %q: %w", p.schema, err)
	}
	for _, parts := range out {
		sort.Slice(parts, func(a, b int) bool { return parts[a].lo < parts[b].lo })
	}
	return out, nil
}

// partitionStart is the lower bound (microseconds since 2000) that
// postgrescopy_maintain put in the name of a partition of store: spans_rows'
// are spans_pYYYYMMDD_HHMI, in UTC.
func partitionStart(store, name string) (int64, bool) {
	prefix := strings.TrimSuffix(store, "_rows") + "_p"
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || len(rest) != len("20060102_1504") {
		return 0, false
	}
	t, err := time.Parse("20060102_1504", rest)
	if err != nil {
		return 0, false
	}
	return pgcopy.TimestamptzMicros(t), true
}

// claim is the routing of one table's rows into a partition, decided in
// the write's transaction.
type claim struct {
	part   partition
	lo, hi int64
	holds  bool // the partition is still routable and its range holds [lo, hi]
}

// queueClaim adds to b what claims c.part for rows of store: it locks store
// and the partition as a COPY into the partition would, and then reads the
// partition's bounds; the locks keep what it reads true until the
// transaction ends. Three statements, read back by readClaim.
// The bounds query goes as the prepared statement named prepared, when
// not "" (claimOIDs its parameters' types).
func (p *partitions) queueClaim(b *pgconn.Batch, store string, c *claim, prepared string) {
	b.ExecParams("LOCK TABLE ONLY "+schema.Qualified(p.schema, store)+" IN ROW EXCLUSIVE MODE", nil, nil, nil, nil)
	b.ExecParams("LOCK TABLE ONLY "+schema.Qualified(p.schema, c.part.name)+" IN ROW EXCLUSIVE MODE", nil, nil, nil, nil)
	params := [][]byte{
		[]byte(strconv.FormatUint(uint64(c.part.parent), 10)),
		[]byte(strconv.FormatUint(uint64(c.part.oid), 10)),
		[]byte(c.part.name),
	}
	results := []int16{pgtype.BinaryFormatCode}
	if prepared != "" {
		b.ExecPrepared(prepared, params, nil, results)
		return
	}
	b.ExecParams(claimSQL, params, claimOIDs, nil, results)
}

// claimOIDs are the types of claimSQL's parameters.
var claimOIDs = []uint32{pgtype.OIDOID, pgtype.OIDOID, pgtype.TextOID}

// claimStatements is how many statements queueClaim adds.
const claimStatements = 3

// readClaim reads the result of queueClaim's bounds query into c.holds.
func (p *partitions) readClaim(res *pgconn.Result, c *claim) error {
	if len(res.Rows) == 0 {
		p.stale() // detached, dropped or changed since it was listed
		return nil
	}
	row := res.Rows[0]
	if len(row) != 2 || len(row[0]) != 8 || len(row[1]) != 8 {
		return fmt.Errorf("read partition %s: unexpected bounds", c.part.name)
	}
	// Binary timestamptz: microseconds since 2000, as the COPY fields.
	from, to := int64(binary.BigEndian.Uint64(row[0])), int64(binary.BigEndian.Uint64(row[1]))
	c.holds = from <= c.lo && c.hi < to
	return nil
}
