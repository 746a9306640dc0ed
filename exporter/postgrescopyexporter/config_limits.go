package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"errors"
	"fmt"

	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Defaults and bounds of the limits section. 64 KiB keeps whole what
// telemetry legitimately carries in one value (stack traces, SQL statements,
// JSON log lines: a few KiB to tens of KiB) while a binary dump pasted into an
// attribute costs at most that much. 1 MiB a row leaves room for a dozen
// values at that limit plus ordinary attributes; a bigger row (thousands of
// events, megabytes of attributes) is a bug upstream, and one such row should
// not decide a batch's memory and WAL. The upper bound keeps every value far
// below what PostgreSQL refuses outright: 255 MB a jsonb document, 1 GB a
// field.
const (
	defaultMaxValueBytes = 64 << 10
	defaultMaxRowBytes   = 1 << 20
	minMaxValueBytes     = 1 << 10 // room for a marker and a useful prefix
	minMaxRowBytes       = 4 << 10 // a row's fixed columns and a few values
	maxMaxRowBytes       = 64 << 20
)

// LimitsConfig bounds what one item may cost; see docs/sanitization.md.
type LimitsConfig struct {
	// max_value_bytes bounds each text value, attribute key or string, log
	// body string and bytes value (as base64), in bytes as stored; a longer
	// one keeps its first bytes, cut between characters, and ends with
	// "[postgrescopy: truncated from N bytes]". Default 0: 65536 (64 KiB), or
	// max_row_bytes if smaller; otherwise 1024 to max_row_bytes.
	MaxValueBytes int `mapstructure:"max_value_bytes"`
	// max_row_bytes bounds one row as encoded; a longer row has its largest
	// text and jsonb values cut to a common share, with markers (numbers and
	// arrays are never cut). Default 0: 1048576 (1 MiB); otherwise 4096 to
	// 67108864 (64 MiB).
	MaxRowBytes int `mapstructure:"max_row_bytes"`
}

// Validate checks the limits section.
func (l *LimitsConfig) Validate() error {
	var errs error
	row := l.rows().MaxRow
	if l.MaxRowBytes != 0 && (l.MaxRowBytes < minMaxRowBytes || l.MaxRowBytes > maxMaxRowBytes) {
		errs = errors.Join(errs, fmt.Errorf(`"max_row_bytes" must be 0 (default %d) or %d to %d, got %d`,
			defaultMaxRowBytes, minMaxRowBytes, maxMaxRowBytes, l.MaxRowBytes))
	}
	if l.MaxValueBytes != 0 && (l.MaxValueBytes < minMaxValueBytes || l.MaxValueBytes > row) {
		errs = errors.Join(errs, fmt.Errorf(`"max_value_bytes" must be 0 (default %d) or %d to max_row_bytes (%d), got %d`,
			defaultMaxValueBytes, minMaxValueBytes, row, l.MaxValueBytes))
	}
	return errs
}

// rows returns the limits with the defaults applied, for rows.Batch; the
// default value limit never exceeds the row limit.
func (l LimitsConfig) rows() rows.Limits {
	out := rows.Limits{MaxValue: l.MaxValueBytes, MaxRow: l.MaxRowBytes}
	if out.MaxRow == 0 {
		out.MaxRow = defaultMaxRowBytes
	}
	if out.MaxValue == 0 {
		out.MaxValue = min(defaultMaxValueBytes, out.MaxRow)
	}
	return out
}

// newBatch returns an empty batch of layout under cfg's limits.
func (cfg *Config) newBatch(layout *tables.Layout) *rows.Batch {
	b := new(rows.Batch)
	b.SetLayout(layout)
	b.SetLimits(cfg.Limits.rows())
	return b
}
