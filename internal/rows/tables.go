package rows

// Table describes one destination table: its name and its columns in the
// order the row writers emit them.
type Table struct {
	Name    string
	Columns []string
}

// Table indexes inside a Batch.
const (
	IdxSpans = iota
	IdxLogs
	IdxGauge
	IdxSum
	IdxHistogram
	IdxExpHistogram
	IdxSummary
	numTables
)

// contextColumns end every table: the instrumentation scope and the resource.
var contextColumns = []string{
	"scope_name", "scope_version",
	"resource_attributes", "scope_attributes",
	"resource_dropped_attributes_count", "scope_dropped_attributes_count",
	"resource_schema_url", "scope_schema_url",
}

// metricColumns start every metric table.
var metricColumns = []string{
	"time", "time_frac_ns", "start_time", "start_time_frac_ns",
	"service_name", "metric_name", "description", "unit", "metric_metadata",
	"attributes", "exemplars", "flags",
}

func cols(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Tables lists every table, indexed by the Idx constants.
var Tables = [numTables]Table{
	IdxSpans: {Name: "spans", Columns: cols([]string{
		"start_time", "start_time_frac_ns", "end_time", "duration_ns",
		"trace_id", "span_id", "parent_span_id", "trace_state", "flags",
		"service_name", "span_name", "span_kind", "status_code", "status_message",
		"span_attributes", "events", "links",
		"dropped_attributes_count", "dropped_events_count", "dropped_links_count",
	}, contextColumns)},
	IdxLogs: {Name: "logs", Columns: cols([]string{
		"timestamp", "timestamp_frac_ns", "observed_timestamp", "observed_timestamp_frac_ns",
		"trace_id", "span_id", "flags", "severity_number", "severity_text",
		"service_name", "body", "event_name", "log_attributes", "dropped_attributes_count",
	}, contextColumns)},
	IdxGauge: {Name: "metrics_gauge", Columns: cols(metricColumns,
		[]string{"value", "value_int"}, contextColumns)},
	IdxSum: {Name: "metrics_sum", Columns: cols(metricColumns,
		[]string{"value", "value_int", "is_monotonic", "aggregation_temporality"}, contextColumns)},
	IdxHistogram: {Name: "metrics_histogram", Columns: cols(metricColumns,
		[]string{"count", "sum", "min", "max", "bucket_counts", "explicit_bounds", "aggregation_temporality"},
		contextColumns)},
	IdxExpHistogram: {Name: "metrics_exponential_histogram", Columns: cols(metricColumns,
		[]string{"count", "sum", "min", "max", "scale", "zero_count", "zero_threshold",
			"positive_offset", "positive_bucket_counts", "negative_offset", "negative_bucket_counts",
			"aggregation_temporality"},
		contextColumns)},
	IdxSummary: {Name: "metrics_summary", Columns: cols(metricColumns,
		[]string{"count", "sum", "quantiles", "quantile_values"}, contextColumns)},
}
