-- Tokens by kind per day, from spans and from token usage metrics
--
-- Answers: how many uncached input, cache read, cache creation, output and
-- reasoning tokens each model used per day over the last 7 days, as counted
-- from the spans (source = 'spans'; output excludes reasoning, input
-- excludes the cached tokens, so the kinds add up without double counting),
-- and the gen_ai.client.token.usage histograms' input and output tokens
-- (source = 'metrics'), which also count calls whose spans were sampled
-- away. Compare the two sources; do not add them.
-- Columns: otel.ai_tokens; metrics are rolled up hourly.
-- Index: ai_spend_hourly (hour), ai_token_metrics_hourly (hour).
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT date_trunc('day', hour, 'UTC') AS day,
       source,
       model,
       token_type,
       sum(tokens)::bigint AS tokens
FROM otel.ai_tokens
WHERE hour > now() - interval '7 days' AND hour <= now()
GROUP BY 1, 2, 3, 4
HAVING sum(tokens) > 0
ORDER BY day DESC, source, model, token_type;
