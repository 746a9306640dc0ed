package rows

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// TestGenAIPresetUsageKeys: cache, reasoning, conversation and agent come
// from the conventions' keys, then OpenLLMetry's, then OpenInference's.
func TestGenAIPresetUsageKeys(t *testing.T) {
	l, err := tables.NewLayout(tables.GenAI())
	require.NoError(t, err)
	r := row(t, l, nil, map[string]any{
		"gen_ai.usage.cache_read.input_tokens": 40, "gen_ai.usage.cache_creation.input_tokens": 20,
		"gen_ai.usage.reasoning.output_tokens": 7, "gen_ai.conversation.id": "c1", "gen_ai.agent.name": "planner",
		// Later keys lose to the conventions' ones.
		"gen_ai.usage.cache_read_input_tokens": 99, "session.id": "s9",
	}, false)
	assert.EqualValues(t, 40, r["gen_ai_cache_read_input_tokens"])
	assert.EqualValues(t, 20, r["gen_ai_cache_creation_input_tokens"])
	assert.EqualValues(t, 7, r["gen_ai_reasoning_output_tokens"])
	assert.Equal(t, "c1", r["gen_ai_conversation_id"])
	assert.Equal(t, "planner", r["gen_ai_agent_name"])

	r = row(t, l, nil, map[string]any{ // OpenLLMetry
		"gen_ai.usage.cache_read_input_tokens": 41, "gen_ai.usage.cache_creation_input_tokens": 21,
		"gen_ai.usage.reasoning_tokens": 8,
	}, false)
	assert.EqualValues(t, 41, r["gen_ai_cache_read_input_tokens"])
	assert.EqualValues(t, 21, r["gen_ai_cache_creation_input_tokens"])
	assert.EqualValues(t, 8, r["gen_ai_reasoning_output_tokens"])

	r = row(t, l, nil, map[string]any{ // OpenInference
		"llm.provider": "anthropic", "llm.model_name": "claude-sonnet-4-5", "llm.token_count.prompt": 100,
		"llm.token_count.completion": 10, "llm.token_count.prompt_details.cache_read": 42,
		"llm.token_count.prompt_details.cache_write": 22, "llm.token_count.completion_details.reasoning": 9,
		"session.id": "s1",
	}, false)
	assert.Equal(t, "anthropic", r["gen_ai_provider_name"])
	assert.Equal(t, "claude-sonnet-4-5", r["gen_ai_response_model"])
	assert.EqualValues(t, 100, r["gen_ai_input_tokens"])
	assert.EqualValues(t, 10, r["gen_ai_output_tokens"])
	assert.EqualValues(t, 42, r["gen_ai_cache_read_input_tokens"])
	assert.EqualValues(t, 22, r["gen_ai_cache_creation_input_tokens"])
	assert.EqualValues(t, 9, r["gen_ai_reasoning_output_tokens"])
	assert.Equal(t, "s1", r["gen_ai_conversation_id"])
}
