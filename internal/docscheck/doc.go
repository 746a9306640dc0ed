// Package docscheck holds the test that keeps README.md and docs/ true to the
// tree: every relative link and anchor resolves, every queries/ file named
// exists, docs/configuration.md names exactly the exporter's configuration
// keys, and every collector config shown loads through the built factory.
// `make lint` runs it; it needs no server.
package docscheck
