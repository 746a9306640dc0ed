package main

import "testing"

// metricSum reads the Redis fault scenarios' reported losses: every series
// of the counter, with or without the _total suffix, and no other counter.
func TestMetricSum(t *testing.T) {
	page := "otelcol_postgrescopy_redis_lost_entries_total{signal=\"traces\"} 98\n" +
		"otelcol_postgrescopy_redis_lost_entries_total{signal=\"logs\"} 2\n" +
		"otelcol_postgrescopy_redis_lost_entries_other 5\n" +
		"otelcol_postgrescopy_redis_data_loss_total 1\n"
	if got := metricSum(page, "otelcol_postgrescopy_redis_lost_entries"); got != 100 {
		t.Errorf("lost entries = %d, want 100", got)
	}
	if got := metricSum(page, "otelcol_postgrescopy_redis_data_loss"); got != 1 {
		t.Errorf("data loss = %d, want 1", got)
	}
	if got := metricSum("", "otelcol_postgrescopy_redis_data_loss"); got != 0 {
		t.Errorf("empty page = %d, want 0", got)
	}
}
