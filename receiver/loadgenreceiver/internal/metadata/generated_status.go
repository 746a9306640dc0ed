// Package metadata holds what mdatagen would generate from metadata.yaml
// (mdatagen is not available to this project, so it is written by hand).
package metadata

import (
	"go.opentelemetry.io/collector/component"
)

var (
	Type      = component.MustNewType("loadgen")
	ScopeName = "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"
)

const (
	TracesStability  = component.StabilityLevelDevelopment
	MetricsStability = component.StabilityLevelDevelopment
	LogsStability    = component.StabilityLevelDevelopment
)
