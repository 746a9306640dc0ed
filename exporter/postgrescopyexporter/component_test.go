package postgrescopyexporter

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/featuregate"
	"gopkg.in/yaml.v3"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
)

// The tests mdatagen would generate from metadata.yaml, written by hand.

func TestComponentFactoryType(t *testing.T) {
	require.Equal(t, metadata.Type, NewFactory().Type())
}

func TestComponentConfigStruct(t *testing.T) {
	require.NoError(t, componenttest.CheckConfigStruct(NewFactory().CreateDefaultConfig()))
}

func TestComponentDefaultQueueBatchSender(t *testing.T) {
	const gate = "pkg.exporterhelper.queueBatchEnabled"
	initial := false
	featuregate.GlobalRegistry().VisitAll(func(g *featuregate.Gate) {
		if g.ID() == gate {
			initial = g.IsEnabled()
		}
	})
	t.Cleanup(func() { _ = featuregate.GlobalRegistry().Set(gate, initial) })
	for _, on := range []bool{false, true} {
		_ = featuregate.GlobalRegistry().Set(gate, on)
		cfg := NewFactory().CreateDefaultConfig()
		v := reflect.ValueOf(cfg).Elem()
		var found []reflect.Value
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).Tag.Get("mapstructure") == "sending_queue" {
				found = append(found, v.Field(i))
			}
		}
		require.Len(t, found, 1, "exactly one sending_queue field")
		q, ok := found[0].Interface().(configoptional.Optional[exporterhelper.QueueBatchConfig])
		require.True(t, ok, "sending_queue is configoptional.Optional[exporterhelper.QueueBatchConfig]")
		assert.Equal(t, metadata.NewDefaultSendingQueueConfig(), q)
	}
}

// metadataFile is the part of metadata.yaml these tests read.
type metadataFile struct {
	Type   string `yaml:"type"`
	Status struct {
		Stability map[string][]string `yaml:"stability"`
	} `yaml:"status"`
	SendingQueue struct {
		Overrides struct {
			QueueSize       int64 `yaml:"queue_size"`
			BlockOnOverflow bool  `yaml:"block_on_overflow"`
			NumConsumers    int   `yaml:"num_consumers"`
			Batch           struct {
				MinSize      int64         `yaml:"min_size"`
				MaxSize      int64         `yaml:"max_size"`
				FlushTimeout time.Duration `yaml:"flush_timeout"`
			} `yaml:"batch"`
		} `yaml:"overrides"`
	} `yaml:"sending_queue"`
	Telemetry struct {
		Metrics map[string]any `yaml:"metrics"`
	} `yaml:"telemetry"`
}

func readMetadata(t *testing.T) metadataFile {
	b, err := os.ReadFile("metadata.yaml")
	require.NoError(t, err)
	var m metadataFile
	require.NoError(t, yaml.Unmarshal(b, &m))
	return m
}

func TestMetadataMatchesCode(t *testing.T) {
	m := readMetadata(t)
	assert.Equal(t, metadata.Type.String(), m.Type)
	// Stability per signal: each signal under exactly one level, the level
	// the factory (internal/metadata) registers it with.
	f := NewFactory()
	code := map[string]component.StabilityLevel{
		"traces": f.TracesStability(), "metrics": f.MetricsStability(), "logs": f.LogsStability(),
	}
	levels := map[string]string{}
	for level, signals := range m.Status.Stability {
		for _, s := range signals {
			_, dup := levels[s]
			assert.False(t, dup, "metadata.yaml states %s twice", s)
			levels[s] = level
		}
	}
	assert.Len(t, levels, len(code), "metadata.yaml states exactly traces, metrics and logs: %v", levels)
	for s, l := range code {
		assert.Equal(t, strings.ToLower(l.String()), levels[s], "stability of %s: metadata.yaml vs internal/metadata", s)
	}
	assert.Equal(t, component.StabilityLevelAlpha, metadata.TracesStability)
	def := metadata.NewDefaultSendingQueueConfig()
	q := def.Get()
	o := m.SendingQueue.Overrides
	assert.Equal(t, o.QueueSize, q.QueueSize)
	assert.Equal(t, o.BlockOnOverflow, q.BlockOnOverflow)
	assert.Equal(t, o.NumConsumers, q.NumConsumers)
	assert.Equal(t, o.Batch.MinSize, q.Batch.Get().MinSize)
	assert.Equal(t, o.Batch.MaxSize, q.Batch.Get().MaxSize)
	assert.Equal(t, o.Batch.FlushTimeout, q.Batch.Get().FlushTimeout)
}

// TestMetadataTelemetryIsEmitted records on every instrument and checks that
// exactly the metrics metadata.yaml documents come out.
func TestMetadataTelemetryIsEmitted(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	tb, err := metadata.NewTelemetryBuilder(tel.NewTelemetrySettings())
	require.NoError(t, err)
	ctx := context.Background()
	tb.PostgrescopyRows.Add(ctx, 1)
	tb.PostgrescopyBytes.Add(ctx, 1)
	tb.PostgrescopyBatches.Add(ctx, 1)
	tb.PostgrescopyCopyDuration.Record(ctx, 1)
	tb.PostgrescopyBatchRows.Record(ctx, 1)
	tb.PostgrescopyEntriesAdded.Add(ctx, 1)
	tb.PostgrescopyBackpressure.Add(ctx, 1)
	tb.PostgrescopyClaimedEntries.Add(ctx, 1)
	tb.PostgrescopyLedgerHits.Add(ctx, 1)
	tb.PostgrescopyUndecodableEntries.Add(ctx, 1)
	tb.PostgrescopyRejectedRows.Add(ctx, 1)
	tb.PostgrescopyFailoverLostRows.Add(ctx, 1)
	tb.PostgrescopyRedisDataLoss.Add(ctx, 1)
	tb.PostgrescopyRedisLostEntries.Add(ctx, 1)
	_, err = tb.RegisterStreamGauges(func(yield func(string, int64, int64, int64)) { yield("traces", 1, 1, 1) })
	require.NoError(t, err)
	_, err = tb.RegisterDurabilityGauge(func() (int64, string) { return 1, "volatile" })
	require.NoError(t, err)
	_, err = tb.RegisterAdmissionGauge(func() int64 { return 1 })
	require.NoError(t, err)

	for name := range readMetadata(t).Telemetry.Metrics {
		_, err := tel.GetMetric("otelcol_" + name)
		assert.NoError(t, err, "metadata.yaml documents otelcol_%s", name)
	}
}
