// Package entry is the Redis stream entry format (Format; Formats lists the
// earlier ones it still reads): a batch's rows as already encoded for
// binary COPY, each table compressed with S2 and checksummed, behind the
// descriptor of the columns they follow (tables.Layout). Append writes an
// entry from a rows.Batch, AddTo reads one back into a batch, and Entries
// streams many as one COPY per table without building a batch. It touches
// no pdata.
package entry // import "github.com/postgrescopy/postgrescopy/internal/entry"
