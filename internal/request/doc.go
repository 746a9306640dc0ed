// Package request holds the exporter's requests as the exporterhelper queue,
// batcher and retry sender carry them: parts keyed once when they enter the
// exporter, merged and split without changing what a key names, cut into
// chunks at deterministic offsets, and encoded for a persistent queue in a
// format every later release reads.
package request
