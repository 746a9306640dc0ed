-- postgrescopy schema version 3: the batch ledger.
-- Each committed batch records here, in the same transaction as its rows, the
-- ids of the Redis entries it came from (stream = the Redis stream key), or a
-- hash of its COPY data for direct writes (stream = 'direct:<signal>'). A
-- redelivered entry or a retried batch whose id is already here was committed:
-- it is acknowledged, not written again. The primary key makes two replicas
-- racing on one entry conflict instead of both committing. Old rows are pruned.
CREATE TABLE IF NOT EXISTS {{schema}}.ledger (
    stream       text        NOT NULL,
    entry_id     text        NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream, entry_id)
);

CREATE INDEX IF NOT EXISTS ledger_committed_at_idx ON {{schema}}.ledger (committed_at);
