package postgrescopyexporter

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/pgtest"
)

// heartbeat is a log record without timestamps: valid OTLP, and the same
// bytes every time it is sent.
func heartbeat() plog.Logs {
	ld := plog.NewLogs()
	lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.Body().SetStr("heartbeat")
	return ld
}

func TestIdenticalRequestsAreDistinctEvents(t *testing.T) {
	cfg, schemaName := testConfig(t)
	ctx := context.Background()
	le, err := NewFactory().CreateLogs(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, le.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, le.Shutdown(ctx)) })

	for range 5 {
		require.NoError(t, le.ConsumeLogs(ctx, heartbeat()))
	}
	require.EqualValues(t, 5, pgtest.Count(t, pgtest.Pool(t), schemaName, "logs"),
		"five requests with the same bytes are five events")
}
