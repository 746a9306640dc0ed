// Package metadata holds the component's type and stability from metadata.yaml,
// in the shape mdatagen generates them; written by hand, since the project does
// not run mdatagen.
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
