-- GenAI calls without a price, per provider and model
--
-- Answers: which models the price catalog is missing: the calls of the last
-- 7 days with neither a reported cost nor a catalog price, and their tokens,
-- most calls first. Add a row for each to the price file.
-- Columns: otel.ai_spend (rollup plus open hour), unpriced_calls; the
-- tokens are those of every call of the model, priced or not.
-- Index: ai_spend_hourly (hour).
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT provider,
       model,
       sum(unpriced_calls) AS unpriced_calls,
       sum(calls) AS calls,
       sum(input_tokens) AS input_tokens,
       sum(output_tokens) AS output_tokens
FROM otel.ai_spend
WHERE hour > now() - interval '7 days' AND hour <= now()
GROUP BY 1, 2
HAVING sum(unpriced_calls) > 0
ORDER BY unpriced_calls DESC, provider, model;
