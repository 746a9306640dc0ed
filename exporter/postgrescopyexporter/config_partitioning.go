package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"errors"
	"fmt"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/schema"
)

// PartitioningConfig lays out the time partitions of every table. Bounds are
// multiples of interval since the Unix epoch (UTC), so replicas agree.
type PartitioningConfig struct {
	// interval is the width of one partition. Default 24h; at least 1h.
	Interval time.Duration `mapstructure:"interval"`
	// premake is how many partitions exist ahead of now. Default 3, 1..366.
	Premake int `mapstructure:"premake"`
	// retention drops partitions (and default-partition rows) older than
	// this. Default 0: keep everything; otherwise at least one interval.
	Retention time.Duration `mapstructure:"retention"`
	// maintenance_interval is how often partitions are made and dropped (by
	// one replica at a time). Default 1h; at least 1m, at most interval × premake.
	MaintenanceInterval time.Duration `mapstructure:"maintenance_interval"`
}

func defaultPartitioningConfig() PartitioningConfig {
	return PartitioningConfig{Interval: 24 * time.Hour, Premake: 3, MaintenanceInterval: time.Hour}
}

// Validate checks the partitioning section.
func (pc *PartitioningConfig) Validate() error {
	var errs error
	if pc.Interval < time.Hour {
		errs = errors.Join(errs, fmt.Errorf(`"interval" must be at least 1h, got %s`, pc.Interval))
	}
	if pc.Premake < 1 || pc.Premake > 366 {
		errs = errors.Join(errs, fmt.Errorf(`"premake" must be in 1..366, got %d`, pc.Premake))
	}
	if pc.Retention != 0 && pc.Retention < pc.Interval {
		errs = errors.Join(errs, fmt.Errorf(`"retention" must be 0 (keep everything) or at least one interval (%s), got %s`, pc.Interval, pc.Retention))
	}
	if pc.MaintenanceInterval < time.Minute || pc.MaintenanceInterval > pc.Interval*time.Duration(pc.Premake) {
		errs = errors.Join(errs, fmt.Errorf(`"maintenance_interval" must be between 1m and interval × premake, got %s`, pc.MaintenanceInterval))
	}
	return errs
}

func (pc *PartitioningConfig) layout() schema.Partitioning {
	return schema.Partitioning{Interval: pc.Interval, Premake: pc.Premake, Retention: pc.Retention}
}
