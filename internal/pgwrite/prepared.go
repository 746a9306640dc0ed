package pgwrite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Prepared statements for the statements every flush sends before its
// COPYs: the ledger insert and the partition claim's bounds query. Sent
// unnamed, each was parsed, analysed and planned again in every write's
// transaction (the claim's catalog query most of all); prepared once per
// connection, it is parsed once, and planned again only until the server
// settles on a generic plan (it tries custom plans first). Only when the
// pool's query_exec_mode keeps statements on its connections
// (cache_statement, cache_describe: pgx's own cache relies on that too);
// with exec, describe_exec or simple_protocol (PgBouncer in transaction
// mode) they stay unnamed, as before.

// preparedKey is the key of a connection's custom data that holds the
// names of the statements prepared on it.
const preparedKey = "postgrescopy.pgwrite.prepared"

// preparesStatements says whether a pool in mode may keep prepared
// statements on its connections.
func preparesStatements(mode pgx.QueryExecMode) bool {
	return mode == pgx.QueryExecModeCacheStatement || mode == pgx.QueryExecModeCacheDescribe
}

// statementName is the name sql is prepared under: from its text, so that
// writers of other schemas on one connection never collide.
func statementName(sql string) string {
	sum := sha256.Sum256([]byte(sql))
	return "postgrescopy_" + hex.EncodeToString(sum[:12])
}

// prepare prepares, once per connection, the statements w sends as
// prepared ones (the ledger insert and the claim's bounds query), all in
// one round trip, and returns their names; "" for each when w does not
// prepare statements.
func (w *Writer) prepare(ctx context.Context, pc *pgconn.PgConn) (ledger, claim string, err error) {
	if !w.prepared {
		return "", "", nil
	}
	ledger, claim = w.ledgerStmt, w.claimStmt
	names, _ := pc.CustomData()[preparedKey].(map[string]bool)
	if names[ledger] && names[claim] {
		return ledger, claim, nil
	}
	p := pc.StartPipeline(ctx)
	p.SendPrepare(ledger, w.ledgerInsertSQL(), ledgerOIDs)
	p.SendPrepare(claim, claimSQL, claimOIDs)
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		_ = p.Close()
		return "", "", err
	}
	for range 2 {
		if _, err := p.GetResults(); err != nil {
			_ = p.Close()
			return "", "", fmt.Errorf("prepare the write's statements: %w", err)
		}
	}
	if err := p.Close(); err != nil {
		return "", "", fmt.Errorf("prepare the write's statements: %w", err)
	}
	if names == nil {
		names = map[string]bool{}
		pc.CustomData()[preparedKey] = names
	}
	names[ledger], names[claim] = true, true
	return ledger, claim, nil
}

// forgetPrepared drops what pc is known to have prepared when err says a
// prepared statement is missing (DEALLOCATE ALL or DISCARD ALL, by a
// pooler or a user), and says so: the write prepares them again.
func forgetPrepared(pc *pgconn.PgConn, err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "26000" {
		delete(pc.CustomData(), preparedKey)
		return true
	}
	return false
}
