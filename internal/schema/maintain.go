package schema

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Action is one thing postgrescopy_maintain did to a partition.
type Action struct {
	Action    string // created, skipped, dropped, expired
	Partition string
	Detail    string
}

// Partitioning is the partition layout maintained for every table.
type Partitioning struct {
	Interval  time.Duration // width of one partition
	Premake   int           // partitions made ahead of now
	Retention time.Duration // 0 keeps everything
}

// Querier is what Maintain needs: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

var _ Querier = (*pgxpool.Pool)(nil)

// Maintain calls the schema's postgrescopy_maintain function, which makes the
// partitions ahead of now and drops the expired ones, under an advisory lock
// so that one replica at a time does it.
func Maintain(ctx context.Context, q Querier, schemaName string, p Partitioning) ([]Action, error) {
	var retention any // NULL keeps everything
	if p.Retention > 0 {
		retention = p.Retention.Seconds()
	}
	rows, err := q.Query(ctx, "SELECT action, partition_name, coalesce(detail, '') FROM "+
		Qualified(schemaName, "postgrescopy_maintain")+
		"(make_interval(secs => $1), $2::integer, make_interval(secs => $3::double precision))",
		p.Interval.Seconds(), p.Premake, retention)
	if err != nil {
		return nil, fmt.Errorf("maintain partitions of schema %q: %w", schemaName, err)
	}
	defer rows.Close()
	var out []Action
	for rows.Next() {
		var a Action
		if err := rows.Scan(&a.Action, &a.Partition, &a.Detail); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("maintain partitions of schema %q: %w", schemaName, err)
	}
	return out, nil
}
