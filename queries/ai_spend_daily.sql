-- AI spend per team and model per day, from the hourly rollup
--
-- Answers: the AI bill over the last 30 days: per day, team, provider and
-- model, the calls, the unpriced calls, the tokens and the cost, dearest
-- first. cost is the provider-reported cost where a span carried one, else
-- tokens × the catalog price valid at the call's time (cached and reasoning
-- tokens at their own rates); unpriced calls had neither and add nothing to
-- cost: price them (pricing: {file: ...}) rather than read them as free.
-- Columns: otel.ai_spend is the rollup (ai_spend_hourly) for the hours
-- before the late window and the calls (gen_ai_calls) from it on, so the
-- open hour and late spans are counted at once. team is the cost attribution
-- dimension named team (cost_attribution: {dimensions: [{name: team, ...}]});
-- NULL without one.
-- Index: ai_spend_hourly (hour); the live part reads only the late window's
-- partitions.
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT date_trunc('day', hour, 'UTC') AS day,
       dims ->> 'team' AS team,
       provider,
       model,
       sum(calls) AS calls,
       sum(unpriced_calls) AS unpriced_calls,
       sum(input_tokens) AS input_tokens,
       sum(cache_read_tokens) AS cache_read_tokens,
       sum(output_tokens) AS output_tokens,
       round(sum(cost), 6) AS cost,
       min(currency) AS currency
FROM otel.ai_spend
WHERE hour > now() - interval '30 days' AND hour <= now()
GROUP BY 1, 2, 3, 4
ORDER BY day DESC, cost DESC, team, model;
