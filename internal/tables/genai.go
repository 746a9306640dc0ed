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
			From: span("gen_ai.provider.name", "gen_ai.system")}, // gen_ai.system: deprecated in 1.37
		{Column: "gen_ai_operation_name", Kind: KindText, Traces: true,
			From: span("gen_ai.operation.name")},
		{Column: "gen_ai_request_model", Kind: KindText, Traces: true,
			From: span("gen_ai.request.model")},
		{Column: "gen_ai_response_model", Kind: KindText, Traces: true,
			From: span("gen_ai.response.model")},
		{Column: "gen_ai_input_tokens", Kind: KindInt64, Traces: true,
			From: span("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")}, // prompt_tokens: deprecated
		{Column: "gen_ai_output_tokens", Kind: KindInt64, Traces: true,
			From: span("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")}, // completion_tokens: deprecated
		{Column: "gen_ai_cost_usd", Kind: KindFloat64, Traces: true,
			From: span("gen_ai.usage.cost", "gen_ai.usage.cost_usd", "llm.usage.cost", "cost_usd")},
	}
}
