package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// result is one timed write: a ceiling run or a strategy at one scale.
type result struct {
	Name string `json:"name"`
	// Key is a strategy's -strategies key.
	Key   string `json:"key,omitempty"`
	Kind  string `json:"kind"` // ceiling, reference (unlogged), strategy, indexes
	Users int    `json:"users"`
	Rows  int64  `json:"rows"`
	// Bytes is the binary COPY size of the rows written, whatever the wire
	// format; MB/s is Bytes/10^6 per second.
	Bytes          int64   `json:"bytes"`
	Seconds        float64 `json:"seconds"`
	RowsPerS       float64 `json:"rows_per_s"`
	MBPerS         float64 `json:"mb_per_s"`
	RatioToCeiling float64 `json:"ratio_to_ceiling"`
	Status         string  `json:"status"` // ok, skipped, unavailable, failed
	Note           string  `json:"note,omitempty"`
	// Runs is the rows/s of every run, in round order (0: the run failed
	// or did not run); the figures above are the fastest's.
	Runs []float64 `json:"runs_rows_per_s,omitempty"`
	// PeakRSSMiB is the collector's peak resident set (VmHWM), collector runs only.
	PeakRSSMiB float64 `json:"peak_rss_mib,omitempty"`
	// InputRSSMiB is the collector's resident set (VmRSS) when generation
	// started: with -pregenerate, what the prepared input holds.
	InputRSSMiB float64 `json:"input_rss_mib,omitempty"`
	// Warmup is the users a collector run wrote untimed before it (0: it
	// timed a new process's first burst).
	Warmup int `json:"warmup_users,omitempty"`
	// CPU is what the write cost in CPU per row, by process.
	CPU *cpuPerRow `json:"cpu_us_per_row,omitempty"`
	// LostRows is how many rows a failed run left missing.
	LostRows int64 `json:"lost_rows"`
	// Retries and Dropped are the loadgen receiver's (collector runs): the
	// refused batches it resent, and the items it gave up on.
	Retries int64 `json:"retries"`
	Dropped int64 `json:"dropped_items"`
}

func newResult(name string, ds *dataset, d time.Duration) result {
	return timed(name, ds.users, ds.totalRows(), ds.totalBytes(), d)
}

func timed(name string, users int, rows, bytes int64, d time.Duration) result {
	r := result{Name: name, Kind: "strategy", Users: users, Rows: rows, Bytes: bytes, Seconds: d.Seconds(), Status: "ok"}
	if secs := d.Seconds(); secs > 0 {
		r.RowsPerS = float64(rows) / secs
		r.MBPerS = float64(bytes) / 1e6 / secs
	}
	return r
}

func collectorResult(name string, users int, rows, bytes int64, run collectorRun) result {
	r := timed(name, users, rows, bytes, run.elapsed)
	r.CPU = run.cpu
	r.Retries, r.Dropped = run.gen.Retries, run.gen.Dropped
	untimed := "collector start-up"
	if run.warmup > 0 {
		r.Warmup = run.warmup
		untimed += fmt.Sprintf(" and a warm-up of %d users", run.warmup)
	}
	r.Note = fmt.Sprintf("%s %.1fs not counted; %d refused batches resent", untimed, run.startup.Seconds(), run.gen.Retries)
	if run.peakRSS > 0 {
		r.PeakRSSMiB = float64(run.peakRSS) / (1 << 20)
		r.Note += fmt.Sprintf("; collector peak RSS %.0f MiB", r.PeakRSSMiB)
	}
	if run.startRSS > 0 {
		r.InputRSSMiB = float64(run.startRSS) / (1 << 20)
		if run.pregenerated {
			r.Note += fmt.Sprintf(" (input prepared in memory: %.0f MiB at start)", r.InputRSSMiB)
		} else {
			r.Note += fmt.Sprintf(" (%.0f MiB at start)", r.InputRSSMiB)
		}
	}
	return r
}

// report is everything a run measured; it is written as JSON as is.
type report struct {
	Machine    machine           `json:"machine"`
	Workload   workload          `json:"workload"`
	Ceiling    []result          `json:"ceiling"`
	Strategies []result          `json:"strategies"`
	Targets    []target          `json:"targets,omitempty"`
	Mixed      *mixedResult      `json:"mixed,omitempty"`
	Indexes    *indexResult      `json:"indexes,omitempty"`
	RowCost    []rowcostResult   `json:"rowcost,omitempty"`
	FlushCost  []flushCostResult `json:"flushcost,omitempty"`
	Sustained  *sustainedResult  `json:"sustained,omitempty"`
	Exporters  []exporterResult  `json:"exporters,omitempty"`
	Notes      []string          `json:"notes,omitempty"`
	// TotalSeconds is the bench's wall time, set-up and clean-up included.
	TotalSeconds float64 `json:"total_seconds"`
}

type workload struct {
	Scale         []int    `json:"scale_users"`
	Users         int      `json:"mixed_and_indexes_users"`
	EventsPerUser int      `json:"events_per_user"`
	Seed          uint64   `json:"seed"`
	Parts         []string `json:"parts"`
	AvgRowBytes   float64  `json:"avg_row_bytes"`
	// CeilingChunkRows is -ceiling-chunk-rows: the ceiling's spans COPYs
	// hold at most that many rows (0: whole files).
	CeilingChunkRows int `json:"ceiling_chunk_rows"`
	// EncodeRowsPerS is loadgen generation plus the exporter's row encoding
	// on one core, without PostgreSQL: the CPU the collector strategies spend
	// before writing.
	EncodeRowsPerS float64 `json:"encode_rows_per_s"`
}

func num(f float64) string {
	s := strconv.FormatFloat(f, 'f', 0, 64)
	// Thousands separators make 5-digit rates readable at a glance.
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

func cell(r result, v string) string {
	if r.Status != "ok" {
		return "—"
	}
	return v
}

func (rep *report) markdown() string {
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("# postgrescopy bench, %s\n\n", rep.Machine.Date)
	w("**Machine:** %s  \n", rep.Machine.line())
	var set []string
	for _, k := range settingsShown {
		if v, ok := rep.Machine.Settings[k]; ok {
			set = append(set, k+"="+v)
		}
	}
	w("**Server settings:** %s  \n", strings.Join(set, ", "))
	if rep.Machine.LoadStart != "" {
		w("**Load average (1/5/15 min):** %s at start, %s at end, on %d cores  \n", rep.Machine.LoadStart, rep.Machine.LoadEnd, rep.Machine.Cores)
	}
	wl := rep.Workload
	w("**Workload:** loadgen, %d events per user (45%% spans, 25%% metric points, 30%% logs), seed %d, avg %.0f bytes per row (binary COPY); scales %s users; mixed and indexes at %d users. Parts: %s.\n\n",
		wl.EventsPerUser, wl.Seed, wl.AvgRowBytes, joinInts(wl.Scale), wl.Users, strings.Join(wl.Parts, ", "))

	if len(rep.Ceiling)+len(rep.Strategies) > 0 {
		w("## Write strategies\n\n")
		w("Every strategy writes the same rows into all seven tables (spans, logs, five metric tables) with the exporter's DDL and indexes. ")
		w("`× ceiling` is rows/s over the best raw `psql \\copy` of the same rows at the same scale in this run. ")
		if wl.CeilingChunkRows > 0 {
			w("The ceiling loads the spans in COPYs of at most %d rows, the exporter's flush size: the AI spend capture trigger reads each COPY's spans back as one transition table, which a whole file's spans make spill and sort. ", wl.CeilingChunkRows)
		}
		warm := 0
		for _, r := range rep.Strategies {
			warm = max(warm, r.Warmup)
		}
		if warm > 0 {
			w("Each collector run first writes as many users as it times (at most %d), of the next seed, untimed, into the same tables, and waits for them to commit (the loadgen receiver's warm-up, `-warmup-users`): the clock runs on a collector that has written such a burst before, as a running one has, as the application strategies run in the bench's own process, warm from the runs before it. A new collector's first burst also pays its first touch of memory and its connections' first rows (`-warmup-users 0` times that). ", warm)
		}
		w("`CPU µs/row` is the CPU time the write cost per row, PostgreSQL + client (psql, the bench's own connections, or the collector process) + Redis when it was used: all of it shares the machine's cores.\n\n")
		w("| Strategy | Users | Rows | Seconds | Rows/s | MB/s | × ceiling | CPU µs/row | Notes |\n")
		w("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, users := range wl.Scale {
			for _, r := range append(append([]result(nil), rep.Ceiling...), rep.Strategies...) {
				if r.Users != users {
					continue
				}
				name := r.Name
				if r.Kind == "ceiling" || r.Kind == "reference" {
					name = "*" + name + "*"
				}
				note := r.Note
				if r.Status != "ok" {
					note = "**" + r.Status + "**: " + note
				}
				w("| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", name, r.Users, num(float64(r.Rows)),
					cell(r, strconv.FormatFloat(r.Seconds, 'f', 2, 64)), cell(r, num(r.RowsPerS)),
					cell(r, strconv.FormatFloat(r.MBPerS, 'f', 1, 64)), cell(r, strconv.FormatFloat(r.RatioToCeiling, 'f', 2, 64)),
					cell(r, r.CPU.String()), strings.ReplaceAll(note, "|", "/"))
			}
		}
		w("\n")
	}
	w("%s", targetsMarkdown(rep.Targets))

	if m := rep.Mixed; m != nil {
		w("## Writes while the queries run\n\n")
		if m.Status != "ok" {
			w("**%s**: %s\n\n", m.Status, m.Note)
		}
		if m.Replica.Status == "unavailable" {
			w("replica: unavailable (%s)\n\n", strings.ReplaceAll(m.Replica.Note, "\n", " "))
		}
		if m.Status == "ok" {
			w("%s", m.markdown())
		}
	}

	if ix := rep.Indexes; ix != nil {
		w("## Indexes\n\n")
		if ix.Status != "ok" {
			w("**%s**\n\n", ix.Status)
		} else {
			w("%s rows (%d users) loaded; each query run once to warm up, then %d times, median shown. ", num(float64(ix.Rows)), ix.Users, ix.Runs)
			w("Indexes: %s.\n\n", strings.Join(ix.Indexes, ", "))
			w("| Query | Without ms | With ms | Speed-up | Plan without | Plan with |\n|---|---:|---:|---:|---|---|\n")
			for _, q := range ix.Queries {
				w("| %s | %.1f | %.1f | %.2f× | %s | %s |\n", q.Title, q.BeforeMs, q.AfterMs, q.Speedup, q.PlanBefore, q.PlanAfter)
			}
			cost := fmt.Sprintf("the indexes cost %.0f%% of the write rate", 100*ix.IngestCost)
			if ix.IngestCost <= 0 {
				cost = "no measurable cost at this size (the difference is noise)"
			}
			w("\nIngest (psql \\copy, one stream, fastest of %d alternating runs): %s rows/s with the indexes, %s rows/s without: %s. Building them after the load instead took %.2fs.\n\n",
				ix.CopyRuns, num(ix.CopyWith.RowsPerS), num(ix.CopyWithout.RowsPerS), cost, ix.BuildSeconds)
		}
	}

	if rep.Sustained != nil {
		w("%s", rep.Sustained.markdown())
	}

	if len(rep.RowCost) > 0 {
		w("%s\n", rowcostMarkdown(rep.RowCost))
	}
	if len(rep.FlushCost) > 0 {
		w("%s", flushCostMarkdown(rep.FlushCost))
	}
	w("%s", exportersMarkdown(rep.Exporters))
	if len(rep.Notes) > 0 {
		w("## Notes\n\n")
		for _, n := range rep.Notes {
			w("- %s\n", n)
		}
		w("\n")
	}
	w("Bench wall time: %s.\n", time.Duration(rep.TotalSeconds*float64(time.Second)).Round(time.Second).String())
	return sb.String()
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// write saves the report as <stamp>.md/.json/.png in dir, and copies them
// to latest.* (a sustained or row cost run alone: to latest-sustained.* or
// latest-rowcost.*, under stamps with that suffix or prefix).
func (rep *report) write(dir, stamp string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{".md": []byte(rep.markdown()), ".json": append(js, '\n')}
	exts := []string{".md", ".json"}
	latest := "latest"
	if len(rep.RowCost) > 0 && len(rep.Ceiling)+len(rep.Strategies) == 0 && rep.Sustained == nil {
		// A row cost run alone keeps the strategies' latest.* as they are.
		stamp = "rowcost-" + stamp
		latest += "-rowcost"
	} else if len(rep.Ceiling)+len(rep.Strategies) > 0 || rep.Mixed != nil || rep.Indexes != nil {
		png, err := rep.chart()
		if err != nil {
			return nil, err
		}
		files[".png"] = png
		exts = append(exts, ".png")
	} else if len(rep.Exporters) > 0 && rep.Sustained == nil && len(rep.RowCost) == 0 {
		// An exporters run alone keeps the strategies' latest.* as they are.
		stamp = "exporters-" + stamp
		latest += "-exporters"
	} else if rep.Sustained != nil {
		// A sustained run alone keeps the strategies' latest.* as they are.
		stamp += "-sustained"
		latest += "-sustained"
	}
	if rep.Sustained != nil && len(rep.Sustained.Minutes) > 0 {
		tp, lat, err := rep.Sustained.charts(rep.Machine.line())
		if err != nil {
			return nil, err
		}
		files["-throughput.png"], files["-latency.png"] = tp, lat
		exts = append(exts, "-throughput.png", "-latency.png")
	}
	var written []string
	for _, ext := range exts {
		for _, base := range []string{stamp, latest} {
			p := filepath.Join(dir, base+ext)
			if err := os.WriteFile(p, files[ext], 0o644); err != nil {
				return written, err
			}
			if base == stamp {
				written = append(written, p)
			}
		}
	}
	return written, nil
}

// markdown is the mixed part's section body: ingest alone and with the
// readers on each server, the replica's lag, and the query latencies.
func (m *mixedResult) markdown() string {
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	where := "the -db server"
	if m.Server == "bench primary" {
		where = "the bench's own primary"
	}
	w("postgrescopy direct ingests %d users (%s rows) into tables on %s preloaded with %s rows, alone and then with %d connections looping over `queries/`",
		m.Users, num(float64(m.Alone.Rows)), where, num(float64(m.PreloadRows)), m.Readers)
	if m.OnReplica != nil {
		w(", first on the primary, then on its streaming replica")
	}
	w(".\n\n")
	rows := []result{m.Alone, m.WithReaders}
	ratios := []string{"1.00", fmt.Sprintf("%.2f", m.Slowdown)}
	if m.OnReplica != nil {
		rows = append(rows, m.OnReplica.Writes)
		ratios = append(ratios, fmt.Sprintf("%.2f", m.OnReplica.Slowdown))
	}
	w("| Run | Rows/s | MB/s | Seconds | × alone |\n|---|---:|---:|---:|---:|\n")
	for i, r := range rows {
		w("| %s | %s | %.1f | %.2f | %s |\n", r.Name, num(r.RowsPerS), r.MBPerS, r.Seconds, ratios[i])
	}
	w("\nWith readers on the same server, ingest runs at %.2f× its speed alone; the readers completed %d queries (%.1f/s).", m.Slowdown, m.QueriesRun, m.QueriesPerS)
	if p := m.OnReplica; p != nil {
		w(" With the readers on the replica, ingest runs at %.2f× its speed alone; the readers completed %d queries (%.1f/s).", p.Slowdown, p.QueriesRun, p.QueriesPerS)
	}
	w("\n\n")

	if rp := m.Replica; rp.Status == "ok" {
		w("**Replica:** PostgreSQL %s, primary made with initdb and replica with `pg_basebackup -R -X stream` (physical slot), both local servers on this machine, started in %.1fs. Primary settings: %s. ",
			rp.Version, rp.SetupSeconds, strings.Join(rp.Settings, ", "))
		w("Lag is sampled every %.0f ms on the primary from `pg_stat_replication` while ingest runs: WAL not yet replayed (`pg_current_wal_lsn() - replay_lsn`) and `replay_lag`; catch-up is the longest wait, after the last row is visible on the primary, until the replica has replayed it.\n\n", rp.LagIntervalMs)
		w("| Run | Samples | Lag max | Lag p95 | replay_lag max ms | replay_lag p95 ms | Catch-up ms |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, l := range []struct {
			name string
			st   *lagStats
		}{{"ingest alone", rp.LagAlone}, {"readers on the primary", rp.LagReadersOnPrim}, {"readers on the replica", rp.LagReadersOnRepl}} {
			if l.st == nil {
				continue
			}
			errs := ""
			if l.st.Errors > 0 {
				errs = fmt.Sprintf(" (%d failed samples)", l.st.Errors)
			}
			w("| %s%s | %d | %s | %s | %.0f | %.0f | %.0f |\n", l.name, errs, l.st.Samples, kib(l.st.MaxBytes), kib(l.st.P95Bytes), l.st.MaxMs, l.st.P95Ms, l.st.CatchUpMs)
		}
		w("\n")
	}

	if p := m.OnReplica; p != nil {
		w("| Query | Runs on primary | p50 ms | p95 ms | max ms | Runs on replica | p50 ms | p95 ms | max ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for i, q := range m.Queries {
			rq := queryStats{}
			if i < len(p.Queries) {
				rq = p.Queries[i]
			}
			w("| %s%s | %d | %.1f | %.1f | %.1f | %d%s | %.1f | %.1f | %.1f |\n", q.Title, queryErrors(q), q.Runs, q.P50Ms, q.P95Ms, q.MaxMs,
				rq.Runs, queryErrors(rq), rq.P50Ms, rq.P95Ms, rq.MaxMs)
		}
	} else {
		w("| Query | Runs | p50 ms | p95 ms | max ms |\n|---|---:|---:|---:|---:|\n")
		for _, q := range m.Queries {
			w("| %s%s | %d | %.1f | %.1f | %.1f |\n", q.Title, queryErrors(q), q.Runs, q.P50Ms, q.P95Ms, q.MaxMs)
		}
	}
	w("\n")
	return sb.String()
}

func queryErrors(q queryStats) string {
	if q.Errors == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d errors)", q.Errors)
}

// kib shows a WAL distance in bytes as KiB or MiB.
func kib(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}
