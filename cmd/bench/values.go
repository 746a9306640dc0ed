package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// The INSERT and pgx CopyFrom strategies stand for an application that holds
// its telemetry as Go values and lets pgx encode them, so the dataset's binary
// fields are decoded back into the Go types pgx takes for each column.

// pgEpoch is where binary timestamptz counts microseconds from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// columnTypes returns the type OID of each of t's columns in schemaName, in
// tables.Tables order.
func columnTypes(ctx context.Context, conn *pgx.Conn, schemaName string, t tables.Table) ([]uint32, error) {
	r, err := conn.Query(ctx, `
SELECT a.atttypid
FROM unnest($2::text[]) WITH ORDINALITY AS c(name, i)
JOIN pg_attribute a ON a.attrelid = $1::regclass AND a.attname = c.name AND NOT a.attisdropped
ORDER BY c.i`, schema.Qualified(schemaName, t.Store), t.Columns)
	if err != nil {
		return nil, fmt.Errorf("column types of %s: %w", t.Name, err)
	}
	oids, err := pgx.CollectRows(r, pgx.RowTo[uint32])
	if err != nil {
		return nil, fmt.Errorf("column types of %s: %w", t.Name, err)
	}
	if len(oids) != len(t.Columns) {
		return nil, fmt.Errorf("table %s has %d of its %d columns", t.Name, len(oids), len(t.Columns))
	}
	return oids, nil
}

// decoder turns binary COPY fields into Go values.
type decoder struct {
	types *pgtype.Map
	oids  [numTables][]uint32
	// maps decodes jsonb into Go values (maps, slices, json.Number) instead
	// of handing pgx the JSON text.
	maps bool
}

func newDecoder(ctx context.Context, conn *pgx.Conn, schemaName string) (*decoder, error) {
	d := &decoder{types: pgtype.NewMap()}
	for i := range tables.Tables {
		// The layout's columns, promoted ones included, as the rows are encoded.
		oids, err := columnTypes(ctx, conn, schemaName, *benchLayout.Table(i))
		if err != nil {
			return nil, err
		}
		d.oids[i] = oids
	}
	return d, nil
}

// row decodes one row of table t; the values own their memory.
func (d *decoder) row(t int, fields [][]byte) ([]any, error) {
	oids := d.oids[t]
	if len(fields) != len(oids) {
		return nil, fmt.Errorf("%s row has %d fields, want %d", benchLayout.Table(t).Name, len(fields), len(oids))
	}
	// An application holds a span's attributes as one map: the long strings
	// go back into it, as the schema before version 9 stored them.
	if err := mergeLongFields(fields, longColumns(benchLayout.Table(t))); err != nil {
		return nil, fmt.Errorf("%s: %w", benchLayout.Table(t).Name, err)
	}
	out := make([]any, len(fields))
	for i, f := range fields {
		v, err := d.value(oids[i], f)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", benchLayout.Table(t).Name, benchLayout.Table(t).Columns[i], err)
		}
		out[i] = v
	}
	return out, nil
}

func (d *decoder) value(oid uint32, f []byte) (any, error) {
	if f == nil {
		return nil, nil
	}
	be := binary.BigEndian
	switch oid {
	case pgtype.BoolOID:
		return f[0] == 1, nil
	case pgtype.Int2OID:
		return int16(be.Uint16(f)), nil
	case pgtype.Int4OID:
		return int32(be.Uint32(f)), nil
	case pgtype.Int8OID:
		return int64(be.Uint64(f)), nil
	case pgtype.Float8OID:
		return math.Float64frombits(be.Uint64(f)), nil
	case pgtype.TextOID:
		return strings.Clone(string(f)), nil
	case pgtype.TimestamptzOID:
		return pgEpoch.Add(time.Duration(int64(be.Uint64(f))) * time.Microsecond), nil
	case pgtype.UUIDOID:
		return pgtype.UUID{Bytes: [16]byte(f), Valid: true}, nil
	case pgtype.JSONBOID:
		// Binary jsonb is a version byte (1) and the JSON text; pgx sends a
		// json.RawMessage as it is, and marshals any other value.
		if d.maps {
			var v any
			dec := json.NewDecoder(bytes.NewReader(f[1:]))
			dec.UseNumber() // keep 1.0, big integers and NaN strings as written
			if err := dec.Decode(&v); err != nil {
				return nil, err
			}
			switch v.(type) {
			case map[string]any, []any:
				return v, nil
			}
			// A scalar (a log body string, say): pgx would take a Go string
			// for JSON text, and nil for SQL NULL; send it as written.
			return json.RawMessage(append([]byte(nil), f[1:]...)), nil
		}
		return json.RawMessage(append([]byte(nil), f[1:]...)), nil
	case pgtype.Int8ArrayOID:
		var v []int64
		err := d.types.Scan(oid, pgtype.BinaryFormatCode, f, &v)
		return v, err
	case pgtype.Float8ArrayOID:
		var v []float64
		err := d.types.Scan(oid, pgtype.BinaryFormatCode, f, &v)
		return v, err
	}
	return nil, fmt.Errorf("no decoder for type oid %d", oid)
}
