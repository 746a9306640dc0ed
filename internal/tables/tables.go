package tables

import (
	"slices"
	"strings"
)

// Kind is a column's PostgreSQL type, as the row writers encode it. The
// writer needs it only off the hot path: to shrink a row over the size limit
// and to render a refused row as JSON.
type Kind uint8

// Column kinds.
const (
	KindTimestamptz  Kind = iota + 1
	KindInt16             // smallint
	KindInt32             // integer
	KindInt64             // bigint, and span ids (8 bytes, same bits)
	KindFloat64           // double precision
	KindBool              // boolean
	KindUUID              // uuid: trace ids
	KindText              // text
	KindJSONB             // jsonb
	KindInt64Array        // bigint[]
	KindFloat64Array      // double precision[]
	KindTextArray         // text[]: the long strings of an attribute map
)

// LongSuffix names the text[] column that follows an attribute map's jsonb
// column (span_attributes_long, log_attributes_long, schema version 9): the
// map's top-level string values longer than LongString bytes, as
// alternating keys and values, NULL when it has none. PostgreSQL lexes a
// jsonb string a character at a time on input and only validates a text
// one; the views read the map whole again (jsonb_object of the pairs
// merged into the jsonb).
const LongSuffix = "_long"

// LongString is the length in bytes over which a top-level string value of
// an attribute map is stored in its LongSuffix column.
const LongString = 256

// Table describes one destination table: its name, its columns in the order
// the row writers emit them, and their kinds.
type Table struct {
	// Name is what queries read: for a signal table, since schema version 3,
	// a view that joins its rows to their context (Store).
	Name string
	// Store is the table the rows are copied into: <name>_rows for a signal
	// table, contexts for the context dictionary.
	Store   string
	Signal  string // traces, logs or metrics; "" for the context dictionary
	Columns []string
	Kinds   []Kind
}

// Table indexes: a rows.Batch holds one encoder per table.
const (
	IdxSpans = iota
	IdxLogs
	IdxGauge
	IdxSum
	IdxHistogram
	IdxExpHistogram
	IdxSummary
	// IdxContexts is the context dictionary: one row per distinct resource
	// and scope, which every signal row references by context_id. It comes
	// last so that the signal tables keep their indexes in entries of the
	// previous release (which have no dictionary).
	IdxContexts
	NumTables
)

// NumSignalTables counts the signal tables (all but the dictionary).
const NumSignalTables = IdxContexts

type column struct {
	name string
	kind Kind
}

// ContextColumns are the instrumentation scope and the resource, which the
// signal tables held in every row until schema version 3 and their views
// still end with; the context dictionary holds them once per context.
var ContextColumns = []string{"scope_name", "scope_version", "resource_attributes", "scope_attributes",
	"resource_dropped_attributes_count", "scope_dropped_attributes_count", "resource_schema_url", "scope_schema_url"}

var contextKinds = []Kind{KindText, KindText, KindJSONB, KindJSONB, KindInt32, KindInt32, KindText, KindText}

// ContextID is the column of a signal row that references its context: a
// 128-bit hash of the context's encoded fields (see rows).
const ContextID = "context_id"

// contextColumns end every signal table: the reference to its context.
var contextColumns = []column{{ContextID, KindUUID}}

// legacyContextColumns ended every signal table before schema version 3, and
// still end them in entries of the previous release.
func legacyContextColumns() []column {
	c := make([]column, len(ContextColumns))
	for i, n := range ContextColumns {
		c[i] = column{n, contextKinds[i]}
	}
	return c
}

// metricColumns start every metric table.
var metricColumns = []column{
	{"time", KindTimestamptz}, {"time_frac_ns", KindInt16},
	{"start_time", KindTimestamptz}, {"start_time_frac_ns", KindInt16},
	{"service_name", KindText}, {"metric_name", KindText}, {"description", KindText}, {"unit", KindText},
	{"metric_metadata", KindJSONB}, {"attributes", KindJSONB}, {"exemplars", KindJSONB}, {"flags", KindInt32},
}

func table(name, signal string, parts ...[]column) Table {
	t := Table{Name: name, Store: name + "_rows", Signal: signal}
	if signal == "" {
		t.Store = name
	}
	for _, p := range parts {
		for _, c := range p {
			t.Columns = append(t.Columns, c.name)
			t.Kinds = append(t.Kinds, c.kind)
		}
	}
	return t
}

// Tables lists every table, indexed by the Idx constants.
var Tables = [NumTables]Table{
	IdxSpans: table("spans", "traces", []column{
		{"start_time", KindTimestamptz}, {"start_time_frac_ns", KindInt16},
		{"end_time", KindTimestamptz}, {"duration_ns", KindInt64},
		{"trace_id", KindUUID}, {"span_id", KindInt64}, {"parent_span_id", KindInt64},
		{"trace_state", KindText}, {"flags", KindInt32},
		{"service_name", KindText}, {"span_name", KindText}, {"span_kind", KindText},
		{"status_code", KindText}, {"status_message", KindText},
		{"span_attributes", KindJSONB}, {"span_attributes" + LongSuffix, KindTextArray}, {"events", KindJSONB}, {"links", KindJSONB},
		{"dropped_attributes_count", KindInt32}, {"dropped_events_count", KindInt32}, {"dropped_links_count", KindInt32},
	}, contextColumns),
	IdxLogs: table("logs", "logs", []column{
		{"timestamp", KindTimestamptz}, {"timestamp_frac_ns", KindInt16},
		{"observed_timestamp", KindTimestamptz}, {"observed_timestamp_frac_ns", KindInt16},
		{"trace_id", KindUUID}, {"span_id", KindInt64}, {"flags", KindInt32},
		{"severity_number", KindInt32}, {"severity_text", KindText},
		{"service_name", KindText}, {"body", KindJSONB}, {"event_name", KindText},
		{"log_attributes", KindJSONB}, {"log_attributes" + LongSuffix, KindTextArray}, {"dropped_attributes_count", KindInt32},
	}, contextColumns),
	IdxGauge: table("metrics_gauge", "metrics", metricColumns,
		[]column{{"value", KindFloat64}, {"value_int", KindInt64}}, contextColumns),
	IdxSum: table("metrics_sum", "metrics", metricColumns,
		[]column{{"value", KindFloat64}, {"value_int", KindInt64}, {"is_monotonic", KindBool},
			{"aggregation_temporality", KindText}}, contextColumns),
	IdxHistogram: table("metrics_histogram", "metrics", metricColumns,
		[]column{{"count", KindInt64}, {"sum", KindFloat64}, {"min", KindFloat64}, {"max", KindFloat64},
			{"bucket_counts", KindInt64Array}, {"explicit_bounds", KindFloat64Array},
			{"aggregation_temporality", KindText}}, contextColumns),
	IdxExpHistogram: table("metrics_exponential_histogram", "metrics", metricColumns,
		[]column{{"count", KindInt64}, {"sum", KindFloat64}, {"min", KindFloat64}, {"max", KindFloat64},
			{"scale", KindInt32}, {"zero_count", KindInt64}, {"zero_threshold", KindFloat64},
			{"positive_offset", KindInt32}, {"positive_bucket_counts", KindInt64Array},
			{"negative_offset", KindInt32}, {"negative_bucket_counts", KindInt64Array},
			{"aggregation_temporality", KindText}}, contextColumns),
	IdxSummary: table("metrics_summary", "metrics", metricColumns,
		[]column{{"count", KindInt64}, {"sum", KindFloat64},
			{"quantiles", KindFloat64Array}, {"quantile_values", KindFloat64Array}}, contextColumns),
	IdxContexts: table("contexts", "", []column{{ContextID, KindUUID}}, legacyContextColumns()),
}

// StoreName is the table that holds table name's rows: <name>_rows for a
// signal table, name itself for any other.
func StoreName(name string) string {
	for _, t := range Tables {
		if t.Name == name {
			return t.Store
		}
	}
	return name
}

// LegacyColumns are table i's built-in columns before schema version 3:
// the context's eight columns in every row instead of context_id, and no
// long strings' column.
func LegacyColumns(i int) []string {
	t := Tables[i]
	if i == IdxContexts {
		return nil
	}
	cols := slices.DeleteFunc(slices.Clone(t.Columns[:len(t.Columns)-1]), func(c string) bool {
		return strings.HasSuffix(c, LongSuffix)
	})
	return append(cols, ContextColumns...)
}
