package pgwrite

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Partition routing. PostgreSQL 15 inserts the rows of a COPY into a
// partitioned table one at a time, without its multi-insert buffers, when
// the table has a trigger with a transition table: spans_rows has the AI
// spend capture trigger. A COPY into one of its partitions keeps the
// buffers and fires that partition's statement triggers instead of the
// parent's (schema version 8 gives every partition the same ones). So a
// batch whose rows all fall in one partition is copied straight into it.
//
// Only a table whose parent has such a trigger is routed (elsewhere COPY
// buffers through the parent already), and only into a plain partition that
// has exactly the parent's statement-level INSERT triggers (name, function,
// enabled), no row security, a range bound on the table's first column
// (its time), and that the role may insert into: anything else goes
// through the parent, as before. The partitions are read from the catalog
// at most every partitionsTTL; in the write's transaction, after locking
// the parent and the partition as the COPY would, the one picked is read
// again, so a partition detached or dropped since, or whose triggers
// changed, is not written: the rows go through the parent.

// partitionsTTL is how long the partitions read from the catalog are used
// before they are read again: maintenance makes a partition ahead of time,
// so a new one is routed to within this of its start.
const partitionsTTL = 30 * time.Second

// pgEpochUnixMicro is 2000-01-01 in Unix microseconds: binary timestamptz
// counts from it.
const pgEpochUnixMicro = 946684800000000

// partitionSQL lists the routable partitions of the tables named by $2
// (stored tables) in schema $1, whose first column is $3's, or only
// partition $4 when set; with each partition's range bound in microseconds
// since 2000.
const partitionSQL = `WITH want(parent, key) AS (SELECT * FROM unnest($2::text[], $3::text[]))
SELECT pr.relname, lf.relname, b[1]::timestamptz, b[2]::timestamptz
FROM want
JOIN pg_namespace ns ON ns.nspname = $1
JOIN pg_class pr ON pr.relnamespace = ns.oid AND pr.relname = want.parent AND pr.relkind = 'p' AND NOT pr.relrowsecurity
JOIN pg_partitioned_table pt ON pt.partrelid = pr.oid AND pt.partstrat = 'r' AND pt.partnatts = 1
JOIN pg_attribute ka ON ka.attrelid = pr.oid AND ka.attnum = pt.partattrs[0] AND ka.attname = want.key
JOIN pg_inherits i ON i.inhparent = pr.oid AND NOT i.inhdetachpending
JOIN pg_class lf ON lf.oid = i.inhrelid AND lf.relkind = 'r' AND NOT lf.relrowsecurity
CROSS JOIN LATERAL regexp_match(pg_get_expr(lf.relpartbound, lf.oid),
    '^FOR VALUES FROM \(''([^'']+)''\) TO \(''([^'']+)''\)$') b
WHERE ($4::text IS NULL OR lf.relname = $4) AND b[1] !~ 'infinity' AND b[2] !~ 'infinity'
  AND EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = pr.oid AND t.tgnewtable IS NOT NULL)
  AND has_table_privilege(lf.oid, 'INSERT')
  AND ARRAY(SELECT (t.tgname, t.tgfoid, t.tgenabled)::text FROM pg_trigger t
            WHERE t.tgrelid = pr.oid AND NOT t.tgisinternal AND t.tgtype::integer & 5 = 4 ORDER BY 1)
    = ARRAY(SELECT (t.tgname, t.tgfoid, t.tgenabled)::text FROM pg_trigger t
            WHERE t.tgrelid = lf.oid AND NOT t.tgisinternal AND t.tgtype::integer & 5 = 4 ORDER BY 1)`

// partition is one routable partition: rows with first column in [lo, hi)
// (microseconds since 2000) belong in it.
type partition struct {
	name   string
	lo, hi int64
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

// stale makes the next lookup read the catalog again.
func (p *partitions) stale() {
	p.mu.Lock()
	p.read = time.Time{}
	p.mu.Unlock()
}

// of returns the routable partitions of store, sorted, reading the catalog
// through tx first when what it read is older than partitionsTTL. One
// writer reads at a time; the others use what was read before.
func (p *partitions) of(ctx context.Context, tx pgx.Tx, store string) ([]partition, error) {
	p.mu.Lock()
	read := !p.reading && time.Since(p.read) > partitionsTTL
	if read {
		p.reading = true
	}
	p.mu.Unlock()
	if read {
		byTable, err := p.load(ctx, tx)
		p.mu.Lock()
		p.reading = false
		if err == nil {
			p.byTable, p.read = byTable, time.Now()
		}
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byTable[store], nil
}

// findPartition returns the partition of parts (sorted) that holds every
// value of [lo, hi].
func findPartition(parts []partition, lo, hi int64) (partition, bool) {
	k := sort.Search(len(parts), func(k int) bool { return parts[k].hi > lo })
	if k < len(parts) && parts[k].lo <= lo && hi < parts[k].hi {
		return parts[k], true
	}
	return partition{}, false
}

// load reads the routable partitions.
func (p *partitions) load(ctx context.Context, tx pgx.Tx) (map[string][]partition, error) {
	rows, err := tx.Query(ctx, partitionSQL, p.schema, p.parents, p.keys, nil)
	if err != nil {
		return nil, fmt.Errorf("read the partitions of schema %q: %w", p.schema, err)
	}
	out, err := scanPartitions(rows)
	if err != nil {
		return nil, fmt.Errorf("read the partitions of schema %q: %w", p.schema, err)
	}
	return out, nil
}

// scanPartitions reads partitionSQL's rows, per stored table, sorted.
func scanPartitions(rows pgx.Rows) (map[string][]partition, error) {
	out := map[string][]partition{}
	var parent, name string
	var lo, hi time.Time
	_, err := pgx.ForEachRow(rows, []any{&parent, &name, &lo, &hi}, func() error {
		out[parent] = append(out[parent], partition{name: name, lo: lo.UnixMicro() - pgEpochUnixMicro, hi: hi.UnixMicro() - pgEpochUnixMicro})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, parts := range out {
		sort.Slice(parts, func(a, b int) bool { return parts[a].lo < parts[b].lo })
	}
	return out, nil
}

// claim locks store and its partition part in tx as a COPY into part
// would, and then reads part again, in one round trip: it reports whether
// part is still routable with the same bounds, which the locks keep true
// until tx ends (detaching or dropping a partition, or one of its
// triggers, waits for them).
func (p *partitions) claim(ctx context.Context, tx pgx.Tx, store string, part partition) (bool, error) {
	b := &pgx.Batch{}
	b.Queue("LOCK TABLE ONLY " + schema.Qualified(p.schema, store) + " IN ROW EXCLUSIVE MODE")
	b.Queue("LOCK TABLE ONLY " + schema.Qualified(p.schema, part.name) + " IN ROW EXCLUSIVE MODE")
	b.Queue(partitionSQL, p.schema, p.parents, p.keys, part.name)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return false, fmt.Errorf("lock partition %s: %w", part.name, err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return false, fmt.Errorf("read partition %s: %w", part.name, err)
	}
	now, err := scanPartitions(rows)
	if err != nil {
		return false, fmt.Errorf("read partition %s: %w", part.name, err)
	}
	got := now[store]
	return len(got) == 1 && got[0] == part, br.Close()
}
