package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// signalKey is the attribute the Collector adds to a component's logs,
// traces and metrics naming its signal (componentattribute.SignalKey).
const signalKey = "otelcol.signal"

// The Collector's telemetry providers and zap core take attributes they
// injected out again through these methods; core's shared components (the
// OTLP receiver) do it with an internal helper that these interfaces mirror.
type (
	injectorCore interface {
		DropInjectedAttributes(attrs ...string) zapcore.Core
	}
	injectorTracerProvider interface {
		DropInjectedAttributes(attrs ...string) trace.TracerProvider
	}
	injectorMeterProvider interface {
		DropInjectedAttributes(attrs ...string) metric.MeterProvider
	}
)

// withoutSignal returns set without the signal attribute. The traces,
// metrics and logs exporters of one config share a client, built with the
// settings of whichever was created first: its logs and metrics would carry
// that one signal whatever they are about. Providers that do not inject
// attributes are returned as they are.
func withoutSignal(set component.TelemetrySettings) component.TelemetrySettings {
	set.Logger = set.Logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		if ic, ok := c.(injectorCore); ok {
			return ic.DropInjectedAttributes(signalKey)
		}
		return c
	}))
	if tp, ok := set.TracerProvider.(injectorTracerProvider); ok {
		set.TracerProvider = tp.DropInjectedAttributes(signalKey)
	}
	if mp, ok := set.MeterProvider.(injectorMeterProvider); ok {
		set.MeterProvider = mp.DropInjectedAttributes(signalKey)
	}
	return set
}
