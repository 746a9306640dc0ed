-- Token usage and cost per model, team and day
--
-- Answers: the AI bill: per day, team and response model, the calls, input
-- and output tokens and their cost in USD over the last 7 days, dearest first.
-- Only CLIENT spans count (the provider and embeddings calls): the LLM proxy's
-- SERVER span repeats its calls' totals and would count them twice.
-- Index: none; the window's bounds prune partitions, then it reads
-- span_attributes (JSONB) of every span in the window.
-- A later schema version promotes these attributes to typed columns.
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT date_trunc('day', start_time) AS day,
       span_attributes ->> 'team' AS team,
       coalesce(span_attributes ->> 'gen_ai.response.model',
                span_attributes ->> 'gen_ai.request.model') AS model,
       count(*) AS calls,
       sum((span_attributes ->> 'gen_ai.usage.input_tokens')::bigint) AS input_tokens,
       sum(coalesce((span_attributes ->> 'gen_ai.usage.output_tokens')::bigint, 0)) AS output_tokens,
       round(sum((span_attributes ->> 'gen_ai.usage.cost')::numeric), 4) AS cost_usd
FROM otel.spans
WHERE start_time > now() - interval '7 days' AND start_time <= now()
  AND span_kind = 'Client'
  AND span_attributes ? 'gen_ai.usage.input_tokens'
GROUP BY 1, 2, 3
ORDER BY cost_usd DESC NULLS LAST, day, team, model;
