-- GenAI calls without a cost, per provider, model and reason
--
-- Answers: which calls of the last 7 days have neither a reported cost nor
-- a catalog price, why, and what to do, most calls first. unpriced_reason
-- no_price: the calls carry tokens but no price file entry matches their
-- provider, model and time: add one (a model name prices its dated
-- versions too). no_tokens: the instrumentation sent no token counts (a
-- price cannot help): OpenLLMetry and OpenInference record none on
-- streamed calls, OpenInference none on embeddings, and a refused call has
-- none; turn on usage in the stream (stream_options: {include_usage: true})
-- and use an instrumentation that records it, or have the SDK report a
-- cost (gen_ai.usage.cost).
-- Columns: otel.ai_spend (rollup, then the calls of the late window),
-- unpriced_calls and no_tokens_calls (NULL for hours rolled up before
-- schema version 10: counted as no_price here).
-- Index: ai_spend_hourly (hour).
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT provider,
       model,
       r.unpriced_reason,
       sum(r.calls) AS unpriced_calls,
       CASE r.unpriced_reason
           WHEN 'no_price' THEN 'add this model to the price file (pricing: {file: ...})'
           ELSE 'the instrumentation sent no token counts: enable usage (stream_options.include_usage) or report a cost'
       END AS what_to_do
FROM otel.ai_spend
CROSS JOIN LATERAL (VALUES ('no_price', unpriced_calls - coalesce(no_tokens_calls, 0)),
                           ('no_tokens', coalesce(no_tokens_calls, 0))) AS r(unpriced_reason, calls)
WHERE hour > now() - interval '7 days' AND hour <= now()
GROUP BY 1, 2, 3
HAVING sum(r.calls) > 0
ORDER BY unpriced_calls DESC, provider, model, unpriced_reason;
