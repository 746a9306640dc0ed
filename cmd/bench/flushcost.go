package main

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgcount"
)

// The flushcost part breaks down what one flush of postgrescopy + Redis
// costs, at every scale: PostgreSQL's time per statement kind of the flush
// transactions (pg_stat_statements, planning included, the statements a
// trigger runs shown apart), the round trips per flush (a proxy between the
// collector and PostgreSQL counts the messages after which the client waits:
// each simple query and each Sync, from BEGIN to COMMIT), and the rows per
// COPY per table. It runs on a server of its own (initdb), which preloads
// pg_stat_statements; the -db server is not touched. Each postgrescopy +
// Redis strategy picked runs once per scale (-variants included: a run pair
// of two builds on the same server).

// flushCostSettings are the part's server settings: the bench primary's,
// with pg_stat_statements tracking every statement, nested ones too.
var flushCostSettings = append(slices.Clone(primarySettings),
	"shared_preload_libraries = 'pg_stat_statements'",
	"pg_stat_statements.track = all",
	"pg_stat_statements.track_planning = on",
	"pg_stat_statements.track_utility = on",
	"pg_stat_statements.max = 10000",
)

// flushCostResult is one strategy's breakdown at one scale.
type flushCostResult struct {
	Key      string  `json:"key"`
	Name     string  `json:"name"`
	Users    int     `json:"users"`
	Status   string  `json:"status"`
	Note     string  `json:"note,omitempty"`
	RowsPerS float64 `json:"rows_per_s"`
	// Flushes are the write transactions the proxy saw commit a ledger
	// insert; LedgerInserts what pg_stat_statements counted of them.
	Flushes       int     `json:"flushes"`
	LedgerInserts int64   `json:"ledger_inserts"`
	RoundTrips    float64 `json:"round_trips_per_flush"`
	MinRoundTrips int     `json:"min_round_trips"`
	MaxRoundTrips int     `json:"max_round_trips"`
	// MsPerFlush is PostgreSQL's time (execution and planning) of the top
	// level statements of the flush kinds, per flush.
	MsPerFlush float64          `json:"pg_ms_per_flush"`
	Kinds      []flushKind      `json:"kinds"`
	Copies     []flushCopyTable `json:"copies"`
}

// flushKind is one kind of statement's cost over a run.
type flushKind struct {
	Kind   string  `json:"kind"`
	Nested bool    `json:"nested"` // run by a trigger: inside its COPY's time
	Calls  int64   `json:"calls"`
	ExecMs float64 `json:"exec_ms"`
	PlanMs float64 `json:"plan_ms"`
	// PerFlush is false for what is not part of a flush (start-up,
	// maintenance, the bench's own statements).
	PerFlush bool `json:"per_flush"`
}

// flushCopyTable is the COPYs of one table over a run.
type flushCopyTable struct {
	Table  string  `json:"table"`
	Copies int64   `json:"copies"`
	Rows   int64   `json:"rows"`
	Ms     float64 `json:"ms"`
}

var (
	copyTableRe = regexp.MustCompile(`(?i)^COPY\s+(?:"(?:[^"]|"")+"|\w+)\.(?:"((?:[^"]|"")+)"|(\w+))`)
	partitionRe = regexp.MustCompile(`^(.+)_p[0-9]{8}_[0-9]{4}$`)
)

// copyTable is the table a COPY statement writes, a partition named as
// its parent's table with " (partition)".
func copyTable(q string) (string, bool) {
	m := copyTableRe.FindStringSubmatch(strings.TrimSpace(q))
	if m == nil {
		return "", false
	}
	t := strings.ReplaceAll(m[1]+m[2], `""`, `"`)
	if p := partitionRe.FindStringSubmatch(t); p != nil {
		return p[1] + " (partition)", true
	}
	return t, true
}

// statementKind names what a statement does in a flush; perFlush is false
// for statements no flush sends.
func statementKind(q string, toplevel bool) (kind string, perFlush bool) {
	u := strings.ToUpper(strings.TrimSpace(q))
	if !toplevel {
		if strings.Contains(u, "AI_SPEND") || strings.Contains(u, "GEN_AI") {
			return "AI spend capture (trigger)", true
		}
		return "nested, other", false
	}
	switch {
	case strings.HasPrefix(u, "BEGIN"):
		return "BEGIN", true
	case strings.HasPrefix(u, "SET LOCAL WORK_MEM"):
		return "SET LOCAL work_mem", true
	case u == "COMMIT":
		return "COMMIT", true
	case u == "ROLLBACK":
		return "ROLLBACK", true
	case strings.HasPrefix(u, "INSERT INTO") && strings.Contains(u, `."LEDGER"`):
		return "ledger insert", true
	case strings.HasPrefix(u, "INSERT INTO") && strings.Contains(u, `."QUARANTINE"`):
		return "quarantine insert", true
	case strings.HasPrefix(u, "INSERT INTO") && strings.Contains(u, `."CONTEXTS"`):
		return "context dictionary insert", true
	case strings.HasPrefix(u, "LOCK TABLE"):
		return "partition claim: locks", true
	case strings.Contains(u, "REGEXP_MATCH(PG_GET_EXPR"):
		return "partition claim: bounds", true
	case strings.HasPrefix(u, "SAVEPOINT") || strings.HasPrefix(u, "RELEASE") || strings.HasPrefix(u, "ROLLBACK TO"):
		return "savepoints (isolation)", true
	case strings.HasPrefix(u, "COPY"):
		if t, ok := copyTable(q); ok {
			return "COPY " + t, true
		}
		return "COPY", true
	case strings.Contains(u, "WITH WANT"):
		return "partition list (every 30 s)", false
	}
	return "other (start-up, maintenance, coordination, bench)", false
}

// runFlushCost runs the part: its own server, the proxy, then every
// postgrescopy + Redis strategy of picked at every scale.
func (b *bench) runFlushCost(ctx context.Context, scale []int, picked []strategy, getDataset func(int) (*dataset, error), dropDataset func(int)) ([]flushCostResult, error) {
	var strats []strategy
	for _, s := range picked {
		if s.redis && s.redisHA == "" && (s.key == targetStrategy || strings.HasPrefix(s.key, targetStrategy+"@")) {
			strats = append(strats, s)
		}
	}
	if len(strats) == 0 {
		return nil, fmt.Errorf("flushcost: no %s strategy picked (-strategies, -variants)", targetStrategy)
	}
	srv := &localServers{}
	defer srv.stop()
	b.progress.step("flushcost: set up a server with pg_stat_statements (initdb)")
	if err := srv.open(b.tmp, "postgrescopy-flushcost-", b.logf); err != nil {
		return nil, fmt.Errorf("flushcost: %w", err)
	}
	port, err := srv.initdb(ctx, "data", flushCostSettings)
	if err != nil {
		return nil, fmt.Errorf("flushcost: %w", err)
	}
	proxy, err := pgcount.Start("127.0.0.1:0", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("flushcost: proxy: %w", err)
	}
	defer proxy.Close()
	_, proxyPort, _ := net.SplitHostPort(proxy.Addr())
	pp, _ := strconv.Atoi(proxyPort)
	cfg, err := pgxpool.ParseConfig(localURL(port))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return nil, fmt.Errorf("flushcost: %w", err)
	}
	// The collectors connect through the proxy; the bench's own statements
	// go straight to the server.
	restore := b.useServer(localURL(pp), pool)
	defer restore()
	schemaName, err := b.newSchema(ctx, "flushcost")
	if err != nil {
		return nil, err
	}
	var out []flushCostResult
	for _, users := range scale {
		ds, err := getDataset(users)
		if err != nil {
			return nil, err
		}
		for _, s := range strats {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			b.progress.step(fmt.Sprintf("flushcost: %s @ %d users", s.displayName(), users))
			if _, err := pool.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
				return nil, fmt.Errorf("flushcost: %w", err)
			}
			proxy.Reset()
			r := b.runStrategy(ctx, s, ds, schemaName, 0, 0)
			fc := flushCostResult{Key: s.key, Name: s.displayName(), Users: users, Status: r.Status, Note: r.Note, RowsPerS: r.RowsPerS}
			if err := fc.read(ctx, pool, proxy.Transactions()); err != nil {
				fc.Status, fc.Note = "failed", err.Error()
			}
			b.logf("flushcost: %s @ %d users: %d flushes, %.1f round trips and %.2f ms of PostgreSQL each", s.displayName(), users, fc.Flushes, fc.RoundTrips, fc.MsPerFlush)
			out = append(out, fc)
		}
		dropDataset(users)
	}
	return out, nil
}

// read fills fc from pg_stat_statements and the proxy's transactions.
func (fc *flushCostResult) read(ctx context.Context, pool *pgxpool.Pool, txs []pgcount.Transaction) error {
	trips := 0
	for _, tx := range txs {
		if !tx.Has(`"ledger"`) || !tx.Has("COPY ") {
			continue
		}
		fc.Flushes++
		trips += tx.RoundTrips
		if fc.MinRoundTrips == 0 || tx.RoundTrips < fc.MinRoundTrips {
			fc.MinRoundTrips = tx.RoundTrips
		}
		fc.MaxRoundTrips = max(fc.MaxRoundTrips, tx.RoundTrips)
	}
	if fc.Flushes > 0 {
		fc.RoundTrips = float64(trips) / float64(fc.Flushes)
	}
	rows, err := pool.Query(ctx, `SELECT query, toplevel, calls, rows, total_exec_time, total_plan_time
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		return err
	}
	kinds := map[string]*flushKind{}
	copies := map[string]*flushCopyTable{}
	var (
		q              string
		top            bool
		calls, n       int64
		execMs, planMs float64
	)
	_, err = pgx.ForEachRow(rows, []any{&q, &top, &calls, &n, &execMs, &planMs}, func() error {
		kind, perFlush := statementKind(q, top)
		k := kinds[kind]
		if k == nil {
			k = &flushKind{Kind: kind, Nested: !top, PerFlush: perFlush}
			kinds[kind] = k
		}
		k.Calls += calls
		k.ExecMs += execMs
		k.PlanMs += planMs
		if t, ok := copyTable(q); ok && top {
			c := copies[t]
			if c == nil {
				c = &flushCopyTable{Table: t}
				copies[t] = c
			}
			c.Copies += calls
			c.Rows += n
			c.Ms += execMs + planMs
		}
		if kind == "ledger insert" {
			fc.LedgerInserts += calls
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range kinds {
		fc.Kinds = append(fc.Kinds, *k)
		if k.PerFlush && !k.Nested && fc.Flushes > 0 {
			fc.MsPerFlush += (k.ExecMs + k.PlanMs) / float64(fc.Flushes)
		}
	}
	slices.SortFunc(fc.Kinds, func(a, b flushKind) int {
		if a.PerFlush != b.PerFlush {
			if a.PerFlush {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	for _, c := range copies {
		fc.Copies = append(fc.Copies, *c)
	}
	slices.SortFunc(fc.Copies, func(a, b flushCopyTable) int { return strings.Compare(a.Table, b.Table) })
	return nil
}

// flushCostMarkdown is the part's section: a summary per scale and
// strategy, PostgreSQL's time per statement kind per flush, and the rows
// per COPY per table.
func flushCostMarkdown(rs []flushCostResult) string {
	var s strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&s, format, a...) }
	w("## Per-flush cost\n\n")
	w("postgrescopy + Redis on the bench's own server (pg_stat_statements, planning tracked), one run per scale; round trips counted by a proxy between the collector and PostgreSQL (each simple query and each Sync from BEGIN to COMMIT of a transaction with a ledger insert and a COPY). ms are PostgreSQL's execution plus planning time; the AI spend capture's statements run inside the spans COPY and are inside its time.\n\n")
	w("| Users | Strategy | rows/s | Flushes | Round trips/flush (min–max) | PostgreSQL ms/flush |\n|---:|---|---:|---:|---:|---:|\n")
	for _, r := range rs {
		if r.Status != "ok" {
			w("| %d | %s | **%s** | | | %s |\n", r.Users, r.Name, r.Status, strings.ReplaceAll(r.Note, "|", "/"))
			continue
		}
		w("| %d | %s | %s | %d | %.2f (%d–%d) | %.2f |\n", r.Users, r.Name, num(r.RowsPerS), r.Flushes, r.RoundTrips, r.MinRoundTrips, r.MaxRoundTrips, r.MsPerFlush)
	}
	w("\nPer flush, by statement kind: calls and ms (of which planning).\n\n")
	w("| Users | Strategy | Statement | calls/flush | ms/flush | plan ms/flush |\n|---:|---|---|---:|---:|---:|\n")
	for _, r := range rs {
		if r.Status != "ok" || r.Flushes == 0 {
			continue
		}
		f := float64(r.Flushes)
		for _, k := range r.Kinds {
			if !k.PerFlush {
				continue
			}
			name := k.Kind
			if k.Nested {
				name += " (nested)"
			}
			w("| %d | %s | %s | %.2f | %.3f | %.3f |\n", r.Users, r.Name, name, float64(k.Calls)/f, (k.ExecMs+k.PlanMs)/f, k.PlanMs/f)
		}
	}
	w("\nRows per COPY, by table (a partition copied into directly is shown as its table's partition).\n\n")
	w("| Users | Strategy | Table | COPYs | rows/COPY | ms/COPY | µs/row |\n|---:|---|---|---:|---:|---:|---:|\n")
	for _, r := range rs {
		if r.Status != "ok" {
			continue
		}
		for _, c := range r.Copies {
			if c.Copies == 0 {
				continue
			}
			us := 0.0
			if c.Rows > 0 {
				us = 1000 * c.Ms / float64(c.Rows)
			}
			w("| %d | %s | %s | %d | %.0f | %.2f | %.1f |\n", r.Users, r.Name, c.Table, c.Copies, float64(c.Rows)/float64(c.Copies), c.Ms/float64(c.Copies), us)
		}
	}
	w("\n")
	return s.String()
}
