// Package metadata holds the component's type and stability from metadata.yaml,
// in the shape mdatagen generates them; written by hand, since the project does
// not run mdatagen.
package metadata

import (
	"go.opentelemetry.io/collector/component"
)

var (
	Type      = component.MustNewType("jaeger_remote_storage")
	ScopeName = "github.com/postgrescopy/postgrescopy/extension/jaegerremotestorageextension"
)

const (
	ExtensionStability = component.StabilityLevelAlpha
)
