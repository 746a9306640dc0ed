package jaegerremotestorageextension

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/postgrescopy/postgrescopy/extension/jaegerremotestorageextension/internal/metadata"
)

// NewFactory returns the jaeger_remote_storage extension's factory.
func NewFactory() extension.Factory {
	return extension.NewFactory(metadata.Type, func() component.Config { return createDefaultConfig() },
		create, metadata.ExtensionStability)
}

func create(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
	return newStorage(cfg.(*Config), set), nil
}
