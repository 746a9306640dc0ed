-- Token usage and cost per model, team and day
--
-- Answers: the AI bill from the raw calls: per day, team and model, the
-- calls, the unpriced ones, input and output tokens and their cost over the
-- last 7 days, dearest first. cost_usd is the provider-reported cost where
-- a span carried one, else tokens × the catalog price (pricing: {file: ...};
-- cached and reasoning tokens at their own rates); unpriced calls add
-- nothing, so price them rather than read them as free. For 30 days and
-- more, read the rollup instead: ai_spend_daily.sql.
-- Only CLIENT spans count (the provider and embeddings calls): the LLM proxy's
-- SERVER span repeats its calls' totals and would count them twice.
-- Columns: otel.gen_ai_calls, a view over the genai preset's promoted
-- columns (promote_preset: genai, the default): no JSONB is read for model,
-- tokens and cost. team is span_attributes ->> 'team' here; a cost
-- attribution dimension (cost_attribution: {dimensions: ...}) puts it in dims.
-- Index: none; the window's bounds prune partitions. At scale the team
-- costs most: span_attributes ->> 'team' decompresses each call's whole
-- attributes (kilobytes with prompts and completions); promote team
-- (promote: [{column: team, ...}]) or read the rollup (docs/benchmarks.md).
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT date_trunc('day', c.start_time) AS day,
       coalesce(c.dims ->> 'team', c.span_attributes ->> 'team') AS team,
       c.model,
       count(*) AS calls,
       count(*) FILTER (WHERE c.cost_source = 'unpriced') AS unpriced_calls,
       sum(c.input_tokens) AS input_tokens,
       sum(coalesce(c.output_tokens, 0)) AS output_tokens,
       round(sum(c.cost), 4) AS cost_usd
FROM otel.gen_ai_calls c
WHERE c.start_time > now() - interval '7 days' AND c.start_time <= now()
  AND c.span_kind = 'Client'
  AND c.input_tokens IS NOT NULL
GROUP BY 1, 2, 3
ORDER BY cost_usd DESC NULLS LAST, day, team, model;
