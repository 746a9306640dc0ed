-- Token usage and cost per model, team and day
--
-- Answers: the AI bill: per day, team and response model, the calls, input
-- and output tokens and their cost in USD over the last 7 days, dearest first.
-- Only CLIENT spans count (the provider and embeddings calls): the LLM proxy's
-- SERVER span repeats its calls' totals and would count them twice.
-- Columns: the genai preset's promoted columns (promote_preset: genai, the
-- default) hold model, tokens and cost, typed: no JSONB is read for them.
-- team is not a GenAI attribute and stays in span_attributes; promote it
-- (promote: [{column: team, type: text, from: ["span:team"]}]) to make the
-- whole query typed.
-- Index: none; the window's bounds prune partitions.
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT date_trunc('day', start_time) AS day,
       span_attributes ->> 'team' AS team,
       coalesce(gen_ai_response_model, gen_ai_request_model) AS model,
       count(*) AS calls,
       sum(gen_ai_input_tokens) AS input_tokens,
       sum(coalesce(gen_ai_output_tokens, 0)) AS output_tokens,
       round(sum(gen_ai_cost_usd)::numeric, 4) AS cost_usd
FROM otel.spans
WHERE start_time > now() - interval '7 days' AND start_time <= now()
  AND span_kind = 'Client'
  AND gen_ai_input_tokens IS NOT NULL
GROUP BY 1, 2, 3
ORDER BY cost_usd DESC NULLS LAST, day, team, model;
