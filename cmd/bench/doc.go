// Command bench runs the article's three experiments on the postgrescopy
// pipeline: write strategies at growing scale against the raw psql \copy
// ceiling, writes while the analytical queries of queries/ run, and the
// effect of the schema's indexes. `make bench` runs it; see docs/benchmarks.md.
package main
