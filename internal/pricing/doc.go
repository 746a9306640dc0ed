// Package pricing reads the operator's price file into the schema's price
// catalog (model_prices) and sets the cost attribution dimensions that the
// AI spend rollup groups by (schema migration 002_ai_spend). Nothing is priced unless
// a price file is configured: a call without a price is counted as unpriced,
// never as free.
package pricing // import "github.com/postgrescopy/postgrescopy/internal/pricing"
