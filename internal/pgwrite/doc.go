// Package pgwrite writes to PostgreSQL: one transaction per batch, the ledger
// keys first, then one binary COPY per table, read from io.Readers (a
// rows.Batch's tables, or entry.Entries streamed from stream entries); when
// PostgreSQL refuses rows on data, their isolation into the rejects table
// while the rest commits; unreadable entries into the quarantine. Classify is
// the one classification of what can go wrong (data, retryable, config,
// permanent) that every caller uses, with the outcome its telemetry reports
// and the consumererror the Collector sees.
package pgwrite
