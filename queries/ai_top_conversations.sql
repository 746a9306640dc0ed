-- The costliest conversations of the last 24 hours
--
-- Answers: which conversations (gen_ai.conversation.id, or OpenInference's
-- session.id) cost the most in the last day: their calls, agents, models,
-- tokens and cost, with how many calls were unpriced.
-- Columns: otel.gen_ai_calls, the raw calls with their computed cost: the
-- rollup does not keep conversation ids (one row per conversation would
-- make it as large as the spans).
-- Index: none; the window's bounds prune partitions.
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT conversation_id,
       count(*) AS calls,
       count(*) FILTER (WHERE cost_source = 'unpriced') AS unpriced_calls,
       string_agg(DISTINCT agent_name, ', ') AS agents,
       string_agg(DISTINCT model, ', ') AS models,
       sum(input_tokens) AS input_tokens,
       sum(output_tokens) AS output_tokens,
       round(sum(cost), 6) AS cost
FROM otel.gen_ai_calls
WHERE start_time > now() - interval '24 hours' AND start_time <= now()
  AND conversation_id IS NOT NULL
GROUP BY 1
ORDER BY cost DESC NULLS LAST, calls DESC
LIMIT 20;
