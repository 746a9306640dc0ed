package postgrescopyexporter

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/request"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// citusCluster starts a Citus cluster of the test's own with
// scripts/citus.sh (the shared one stays up for the other tests) and
// returns its coordinator's URL and the directory of its nodes.
func citusCluster(t *testing.T) (string, string) {
	pgtest.CitusURL(t) // skipped where make test has no Citus
	data := t.TempDir()
	script, err := filepath.Abs("../../scripts/citus.sh")
	require.NoError(t, err)
	run := func(arg string) ([]byte, error) {
		cmd := exec.Command(script, arg)
		cmd.Env = append(os.Environ(), "POSTGRESCOPY_DATA="+data, "POSTGRESCOPY_CITUS_URL=")
		return cmd.CombinedOutput()
	}
	t.Cleanup(func() {
		out, err := run("stop")
		assert.NoError(t, err, "%s", out)
	})
	out, err := run("start")
	require.NoError(t, err, "%s", out)
	env, err := os.ReadFile(filepath.Join(data, "citus.env"))
	require.NoError(t, err)
	url, ok := strings.CutPrefix(strings.TrimSpace(string(env)), "POSTGRESCOPY_CITUS_URL=")
	require.True(t, ok, "%s", env)
	nodes, err := os.ReadFile(filepath.Join(data, "citus.dir"))
	require.NoError(t, err)
	return strings.Trim(url, "'"), strings.TrimSpace(string(nodes))
}

// pgCtl runs pg_ctl on one node of a citusCluster, as the nodes' owner.
func pgCtl(t *testing.T, nodes, node string, args ...string) {
	t.Helper()
	bin, err := os.ReadFile(filepath.Join(nodes, "bin"))
	require.NoError(t, err)
	name, argv := filepath.Join(strings.TrimSpace(string(bin)), "pg_ctl"), append([]string{"-D", filepath.Join(nodes, node), "-w"}, args...)
	if os.Geteuid() == 0 {
		name, argv = "runuser", append([]string{"-u", "postgres", "--", name}, argv...)
	}
	cmd := exec.Command(name, argv...)
	cmd.WaitDelay = 5 * time.Second // the postmaster must not hold our pipe
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "pg_ctl %v: %s", args, out)
}

// TestCitusWorkerDown: while a worker is stopped, no batch commits, not
// even one whose spans all live on the other worker (every batch writes the
// ledger, a reference table on every node). The write fails as retryable,
// nothing goes to rejects, and once the worker is back the same batch
// commits, once. It logs how long a write takes to fail.
func TestCitusWorkerDown(t *testing.T) {
	t.Parallel() // on a cluster of its own: it overlaps the other tests
	url, nodes := citusCluster(t)
	ctx := context.Background()
	cfg, name, pool := citusConfigAt(t, url)
	e, err := newExporter(cfg, exportertest.NewNopSettings(metadata.Type))
	require.NoError(t, err)
	require.NoError(t, e.start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, e.shutdown(ctx)) })
	push := pusher(e, request.Traces)
	spans := func(where string) string {
		return "SELECT count(*) FROM " + schema.Qualified(name, "spans") + where
	}

	begin := time.Now()
	require.NoError(t, push(ctx, request.New(request.Traces, makeTraces(10, "up"))))
	t.Logf("a write of 10 spans with both workers up: %v", time.Since(begin))

	pgCtl(t, nodes, "worker2", "-m", "fast", "stop")
	stopped := true
	t.Cleanup(func() {
		if stopped {
			pgCtl(t, nodes, "worker2", "-l", filepath.Join(nodes, "worker2.log"), "start")
		}
	})
	// One trace whose shard is on worker1, which is up.
	ports, err := os.ReadFile(filepath.Join(nodes, "ports"))
	require.NoError(t, err)
	worker1 := strings.Fields(string(ports))[1]
	var trace pcommon.TraceID
	for i := range 256 {
		trace = pcommon.TraceID{0x0d, byte(i), 15: 1}
		var port string
		require.NoError(t, pool.QueryRow(ctx, `SELECT n.nodeport::text FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
WHERE p.shardid = get_shard_id_for_distribution_column($1, $2::uuid)`, schema.Qualified(name, "spans_rows"), fmt.Sprintf("%x-%x-%x-%x-%x", trace[0:4], trace[4:6], trace[6:8], trace[8:10], trace[10:16])).Scan(&port))
		if port == worker1 {
			break
		}
	}
	td := makeTraces(10, "down")
	for i := range 10 {
		td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(i).SetTraceID(trace)
	}
	req := request.New(request.Traces, td)
	for i := range 3 {
		begin = time.Now()
		err = push(ctx, req)
		took := time.Since(begin)
		require.Error(t, err, "attempt %d with a worker down", i+1)
		t.Logf("attempt %d with worker2 stopped: failed after %v: %v", i+1, took, err)
		assert.Equal(t, pgwrite.Retryable, pgwrite.Classify(err), "%v", err)
		assert.Less(t, took, 10*time.Second, "a stopped server refuses the connection at once")
	}
	// A read of every shard fails too; this one reads worker1's shard.
	inTrace := " WHERE trace_id = '" + fmt.Sprintf("%x-%x-%x-%x-%x", trace[0:4], trace[4:6], trace[6:8], trace[8:10], trace[10:16]) + "'"
	assert.Zero(t, count(t, pool, spans(inTrace)), "nothing of the batch committed")
	assert.Zero(t, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "rejects")), "a worker down is not bad data")

	pgCtl(t, nodes, "worker2", "-l", filepath.Join(nodes, "worker2.log"), "start")
	stopped = false
	begin = time.Now()
	require.NoError(t, push(ctx, req), "the same batch once the worker is back")
	t.Logf("the retried write once worker2 is back: %v", time.Since(begin))
	assert.Equal(t, 10, count(t, pool, spans(inTrace)), "written once")
	assert.Equal(t, 20, count(t, pool, spans("")))
}
