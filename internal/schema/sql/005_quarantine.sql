-- postgrescopy schema version 5: the quarantine.
-- A Redis stream entry that cannot be read (its rows are cut, a compressed
-- table fails its checksum, an OTLP payload does not parse) is not deleted:
-- it is stored here, bytes intact, in the same transaction as the batch it
-- came with and the ledger keys that acknowledge it, and only then removed
-- from the stream.
--
--   stream      the Redis stream key
--   entry_id    the entry's stream id
--   ledger_key  its key in the ledger
--   format      the entry's format field ('' for OTLP protobuf, 'copy1')
--   reason      why it was refused
--   payload     the entry's bytes, exactly as read from Redis
CREATE TABLE IF NOT EXISTS {{schema}}.quarantine (
    quarantined_at timestamptz NOT NULL DEFAULT now(),
    stream         text        NOT NULL,
    entry_id       text        NOT NULL,
    ledger_key     text        NOT NULL,
    format         text        NOT NULL,
    reason         text        NOT NULL,
    payload        bytea       NOT NULL
);

CREATE INDEX IF NOT EXISTS quarantine_quarantined_at_idx ON {{schema}}.quarantine (quarantined_at);
