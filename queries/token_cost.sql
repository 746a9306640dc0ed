-- Token usage and cost per model, team and day
--
-- Answers: the AI bill: per day, team and model, the calls, the unpriced
-- ones (apart: without a price, without token counts), input and output
-- tokens and their cost over the last 7 days, dearest first. cost_usd is
-- the provider-reported cost where a span carried one, else tokens × the
-- catalog price valid at the call's time (pricing: {file: ...}; cached and
-- reasoning tokens at their own rates); unpriced calls add nothing, so
-- price them rather than read them as free (queries/ai_unpriced_calls.sql
-- says how, per model). Every GenAI call counts, whatever its span kind
-- (OpenInference's are INTERNAL), except SERVER spans: an LLM proxy's
-- server span repeats its calls' totals (gen_ai_spans leaves them out).
-- team is the cost attribution dimension named team (cost_attribution:
-- {dimensions: ...}), else the span attribute team.
-- Columns: otel.ai_spend_groups(from, from included, to, to included, team,
-- hourly): the calls aggregated per hour and minute as they were written
-- (ai_spend_partial_hour, ai_spend_partial), priced per group: whole hours
-- from the hour rows, the hours a bound or a price boundary cuts from their
-- minutes, and the minutes the partials cannot answer exactly (a window
-- bound or a price boundary between a group's calls, calls stored before
-- schema version 5) from the raw calls (gen_ai_calls). The same answer as
-- grouping gen_ai_calls, without reading each call.
-- Index: ai_spend_partial_hour (hour), ai_spend_partial (minute).
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT date_trunc('day', g.period) AS day,
       g.team,
       g.model,
       sum(g.calls)::bigint AS calls,
       sum(g.unpriced_calls)::bigint AS unpriced_calls,
       sum(g.unpriced_calls - g.no_tokens_calls)::bigint AS unpriced_no_price,
       sum(g.no_tokens_calls)::bigint AS unpriced_no_tokens,
       sum(g.input_tokens) AS input_tokens,
       sum(g.output_tokens) AS output_tokens,
       round(sum(g.cost), 6) AS cost_usd
FROM otel.ai_spend_groups(now() - interval '7 days', false, now(), true, true, true) g
GROUP BY 1, 2, 3
ORDER BY cost_usd DESC NULLS LAST, day, team, model;
