// Package metadata holds the component's type, stability and (for the exporter)
// telemetry from metadata.yaml, in the shape mdatagen generates them; written by
// hand, since the project does not run mdatagen.
package metadata

import (
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
)

var (
	Type      = component.MustNewType("postgrescopy")
	ScopeName = "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"
)

const (
	TracesStability  = component.StabilityLevelAlpha
	MetricsStability = component.StabilityLevelAlpha
	LogsStability    = component.StabilityLevelAlpha
)

// NewDefaultSendingQueueConfig is the exporter's sending_queue default (see
// metadata.yaml's sending_queue overrides): batching on, batches sized in
// items, because COPY pays off only for large batches. 5,000 rows is already
// large for COPY (the bench's pgx CopyFrom strategy), while bigger batches
// cost the collector more memory to encode them in (profiled: fresh pages for
// 20,000-row buffers were most of the direct path's CPU). A batch short of
// min_size waits 20ms, not the Collector's 200ms: callers wait for their
// commit (wait_for_result), so a batch of few waiting callers waits for
// items that cannot come; under a sustained load the rate is the same
// (metadata.yaml cites the measurement). The queue is
// sized in bytes (protobuf, as the Collector's bytes sizer counts them), so
// that what it holds bounds the collector's memory whatever an item weighs:
// an item count let large spans fill gigabytes. 32 MiB hold a full 5,000-item
// batch for each of the two consumers with spans of 3 KB (the loadgen's AI
// spans, prompts included). A full queue blocks the caller
// (block_on_overflow) instead of refusing: an in-process receiver waits, an
// OTLP client's request waits within its deadline (measured at 1,000 bench
// users: refusing dropped 13% of the items of a receiver that does not
// retry; see docs/benchmarks.md). A request is acknowledged only once its
// rows are committed (wait_for_result): an in-memory queue then holds
// nothing acknowledged that a stop or a crash could lose.
// DefaultQueueBytes is the default sending_queue::queue_size, per signal.
const DefaultQueueBytes = 32 << 20

func NewDefaultSendingQueueConfig() configoptional.Optional[exporterhelper.QueueBatchConfig] {
	q := exporterhelper.NewDefaultQueueConfig()
	q.WaitForResult = true
	q.Sizer = exporterhelper.RequestSizerTypeBytes
	q.QueueSize = DefaultQueueBytes
	q.NumConsumers = 2
	q.BlockOnOverflow = true
	b := exporterhelper.NewDefaultBatchConfig()
	b.Sizer = exporterhelper.RequestSizerTypeItems
	b.MinSize = 2_000
	b.MaxSize = 5_000
	b.FlushTimeout = 20 * time.Millisecond
	q.Batch = configoptional.Some(b)
	return configoptional.Some(q)
}
