package tables

// GenAI is the genai preset: the OpenTelemetry GenAI span attributes that
// cost and usage queries read, promoted on spans. Each column lists the
// current semantic-convention key first, then the names it replaced or that
// vendors use.
//
// No cost attribute is standardized by the GenAI semantic conventions (as of
// their 1.37 release): gen_ai.usage.cost is what LLM proxies and several SDKs
// emit, and the other cost keys are common vendor spellings. All are read as
// US dollars.
func GenAI() []Promoted {
	span := func(keys ...string) []Source {
		out := make([]Source, len(keys))
		for i, k := range keys {
			out[i] = Source{Scope: ScopeSpan, Key: k}
		}
		return out
	}
	return []Promoted{
		{Column: "gen_ai_provider_name", Kind: KindText, Traces: true,
			From: span("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")}, // gen_ai.system: deprecated in 1.37
		// openinference.span.kind (LLM, EMBEDDING, CHAIN...) is
		// OpenInference's only word on the operation: gen_ai_spans maps LLM
		// to chat and EMBEDDING to embeddings, and its other kinds to no
		// operation (schema 010).
		{Column: "gen_ai_operation_name", Kind: KindText, Traces: true,
			From: span("gen_ai.operation.name", "openinference.span.kind")},
		{Column: "gen_ai_request_model", Kind: KindText, Traces: true,
			From: span("gen_ai.request.model")},
		{Column: "gen_ai_response_model", Kind: KindText, Traces: true,
			From: span("gen_ai.response.model", "llm.model_name", "embedding.model_name")}, // llm.*, embedding.*: OpenInference
		{Column: "gen_ai_input_tokens", Kind: KindInt64, Traces: true,
			From: span("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")}, // prompt_tokens: deprecated
		{Column: "gen_ai_output_tokens", Kind: KindInt64, Traces: true,
			From: span("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")}, // completion_tokens: deprecated
		{Column: "gen_ai_cost_usd", Kind: KindFloat64, Traces: true,
			From: span("gen_ai.usage.cost", "gen_ai.usage.cost_usd", "llm.usage.cost", "cost_usd")},
		// Cached and reasoning tokens are part of the input and output
		// totals; the cost view prices them apart (schema 006). The second
		// key is OpenLLMetry's, the third OpenInference's, the fourth the
		// Vercel AI SDK's (its call spans carry it beside gen_ai.usage.*).
		{Column: "gen_ai_cache_read_input_tokens", Kind: KindInt64, Traces: true,
			From: span("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens", "llm.token_count.prompt_details.cache_read", "ai.usage.cachedInputTokens")},
		{Column: "gen_ai_cache_creation_input_tokens", Kind: KindInt64, Traces: true,
			From: span("gen_ai.usage.cache_creation.input_tokens", "gen_ai.usage.cache_creation_input_tokens", "llm.token_count.prompt_details.cache_write")},
		{Column: "gen_ai_reasoning_output_tokens", Kind: KindInt64, Traces: true,
			From: span("gen_ai.usage.reasoning.output_tokens", "gen_ai.usage.reasoning_tokens", "llm.token_count.completion_details.reasoning", "ai.usage.reasoningTokens")},
		{Column: "gen_ai_conversation_id", Kind: KindText, Traces: true,
			From: span("gen_ai.conversation.id", "session.id")}, // session.id: OpenInference
		{Column: "gen_ai_agent_name", Kind: KindText, Traces: true,
			From: span("gen_ai.agent.name")},
	}
}
