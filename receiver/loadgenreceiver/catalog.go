package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"math/rand/v2"
	"strings"
	"sync"
)

// model is a provider model with list prices, so gen_ai.usage.cost is what
// a proxy would bill.
type model struct {
	provider     string // gen_ai.provider.name
	request      string // gen_ai.request.model
	response     string // gen_ai.response.model
	host         string // server.address
	path         string // url path of the chat call
	inPrice      float64
	outPrice     float64 // USD per million tokens
	ttft         float64 // typical seconds to first token
	tokensPerSec float64
}

func (m *model) cost(in, out int) float64 {
	return (float64(in)*m.inPrice + float64(out)*m.outPrice) / 1e6
}

var modelCatalog = []model{
	{"openai", "gpt-4o", "gpt-4o-2024-08-06", "api.openai.com", "/v1/chat/completions", 2.5, 10, 0.45, 90},
	{"openai", "gpt-4o-mini", "gpt-4o-mini-2024-07-18", "api.openai.com", "/v1/chat/completions", 0.15, 0.6, 0.3, 120},
	{"openai", "gpt-4.1", "gpt-4.1-2025-04-14", "api.openai.com", "/v1/chat/completions", 2, 8, 0.5, 80},
	{"openai", "o3-mini", "o3-mini-2025-01-31", "api.openai.com", "/v1/chat/completions", 1.1, 4.4, 2, 150},
	{"anthropic", "claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "api.anthropic.com", "/v1/messages", 3, 15, 0.7, 70},
	{"anthropic", "claude-haiku-4-5", "claude-haiku-4-5-20251001", "api.anthropic.com", "/v1/messages", 1, 5, 0.4, 130},
	{"anthropic", "claude-opus-4-1", "claude-opus-4-1-20250805", "api.anthropic.com", "/v1/messages", 15, 75, 1.1, 40},
	{"gcp.gemini", "gemini-2.5-pro", "gemini-2.5-pro", "generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-pro:generateContent", 1.25, 10, 0.9, 85},
	{"gcp.gemini", "gemini-2.5-flash", "gemini-2.5-flash", "generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-flash:generateContent", 0.3, 2.5, 0.35, 180},
	{"aws.bedrock", "anthropic.claude-3-5-haiku-20241022-v1:0", "anthropic.claude-3-5-haiku-20241022-v1:0", "bedrock-runtime.us-east-1.amazonaws.com", "/model/anthropic.claude-3-5-haiku-20241022-v1:0/converse", 0.8, 4, 0.5, 100},
	{"azure.ai.openai", "gpt-4o", "gpt-4o-2024-11-20", "acme-prod.openai.azure.com", "/openai/deployments/gpt-4o/chat/completions", 2.5, 10, 0.5, 85},
	{"mistral_ai", "mistral-large-latest", "mistral-large-2411", "api.mistral.ai", "/v1/chat/completions", 2, 6, 0.5, 70},
}

// The embeddings model the retrieval service calls.
var embedModel = model{"openai", "text-embedding-3-small", "text-embedding-3-small", "api.openai.com", "/v1/embeddings", 0.02, 0, 0.05, 0}

// ModelPrice is a model the generator calls, under the names its spans
// carry, and the list prices its gen_ai.usage.cost is computed from.
type ModelPrice struct {
	Provider string  // gen_ai.provider.name
	Request  string  // gen_ai.request.model
	Response string  // gen_ai.response.model; a failed call carries only Request
	Input    float64 // USD per million input tokens
	Output   float64 // USD per million output tokens
}

// Models returns every model whose calls the generator gives tokens: the
// chat models and the embeddings model (its moderation call has none to
// price). A price catalog for the generator's calls is derived from it, so
// that the two cannot drift.
func Models() []ModelPrice {
	out := make([]ModelPrice, 0, len(modelCatalog)+1)
	for _, m := range append(modelCatalog[:len(modelCatalog):len(modelCatalog)], embedModel) {
		out = append(out, ModelPrice{Provider: m.provider, Request: m.request, Response: m.response, Input: m.inPrice, Output: m.outPrice})
	}
	return out
}

type team struct {
	name       string
	costCenter string
	projects   []string
}

var teams = []team{
	{"platform", "CC-1010", []string{"developer-portal", "ci-runners", "service-mesh"}},
	{"infra", "CC-1020", []string{"kubernetes", "observability", "networking"}},
	{"security", "CC-1500", []string{"appsec", "detection-rules"}},
	{"payments", "CC-2040", []string{"checkout", "ledger", "fraud-detection"}},
	{"billing", "CC-2050", []string{"invoicing", "usage-metering"}},
	{"search", "CC-2310", []string{"query-understanding", "ranking", "autocomplete"}},
	{"web", "CC-3100", []string{"storefront", "design-system"}},
	{"mobile", "CC-3120", []string{"ios-app", "android-app"}},
	{"growth", "CC-3300", []string{"onboarding", "experiments"}},
	{"data", "CC-4100", []string{"warehouse", "etl-pipelines", "bi-dashboards"}},
	{"ml-research", "CC-4700", []string{"eval-harness", "fine-tuning", "rag-lab"}},
	{"support-tools", "CC-5200", []string{"agent-assist", "ticket-triage"}},
}

// clientApp is the AI assistant or desktop app a user works in.
type clientApp struct {
	name      string
	userAgent string
}

var clientApps = []clientApp{
	{"claude-code", "claude-cli/2.0.14 (external, cli)"},
	{"cursor", "Cursor/1.7.33 (darwin arm64) Electron/34.5.8 Chrome/132.0.6834.210"},
	{"vscode-copilot", "GitHubCopilotChat/0.32.1 vscode/1.105.0 (linux x64)"},
	{"desktop-app", "AcmeAssistant/3.12.0 (Macintosh; Intel Mac OS X 14_6) Electron/33.2.1"},
	{"web-chat", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/141.0.0.0 Safari/537.36"},
	{"jetbrains-ai", "JetBrains-AI-Assistant/251.26094 IntelliJ-IDEA/2025.1.3 (Linux amd64)"},
	{"sdk-python", "OpenAI/Python 1.109.1 (linux; CPython 3.12.7)"},
}

type tool struct {
	name string
	args string // JSON arguments template
}

var toolCatalog = []tool{
	{"web_search", `{"query":"%s","max_results":5}`},
	{"code_search", `{"repo":"acme/monorepo","query":"%s","limit":20}`},
	{"jira_lookup", `{"jql":"project = PLAT AND text ~ \"%s\"","fields":["summary","status"]}`},
	{"run_tests", `{"package":"./internal/...","filter":"%s"}`},
	{"read_file", `{"path":"services/chat/%s.go"}`},
	{"sql_query", `{"database":"analytics","sql":"select count(*) from events where name = '%s'"}`},
}

var systemPrompts = []string{
	"You are Acme's internal engineering assistant. Answer concisely, cite the internal documents you were given by their id, prefer code over prose, and say so when the context does not contain the answer. Never reveal credentials or personal data. Format code blocks with the language name.",
	"You are a senior software engineer pairing with the user inside their editor. Keep changes minimal, explain the reason for each change in one sentence, follow the repository's existing style, and ask before deleting files. When tests fail, read the failure before proposing a fix.",
	"You are a support copilot. Summarise the customer's issue, list the likely causes from the knowledge base excerpts, propose the next step, and draft a reply in a friendly, professional tone. Do not promise refunds or dates. Escalate security issues immediately.",
}

// corpusWords is the vocabulary of the synthetic prompts and completions.
var corpusWords = strings.Fields(`the a an of to in for on with by from and or but not is are was be
request response latency token tokens model prompt completion context window cache retrieval
index vector embedding chunk document query table column partition replica primary write read
batch copy insert update delete transaction commit rollback lock deadlock timeout retry backoff
queue stream consumer producer worker pool connection session user team project cost center
budget invoice usage limit quota rate error warning failure success deploy release rollout
canary feature flag config secret service endpoint gateway proxy handler function method
struct interface package module import test benchmark coverage lint build pipeline runner job
kubernetes pod node cluster namespace container image registry volume storage disk memory cpu
trace span metric log attribute resource scope exporter receiver processor collector pipeline
dashboard alert threshold percentile histogram gauge counter summary sample window interval
customer ticket refund order payment checkout cart price discount shipping address account
should could would will can must may please explain why how what when where which refactor
this that these those it its we our you your they their code change diff file line function
returns value error nil pointer slice map channel goroutine context cancel deadline mutex`)

// corpus is a fixed pseudo-text that prompts and completions are cut from.
// Slicing a string does not copy, so a 4 KB prompt costs almost nothing to
// make; the text does not depend on the seed.
var corpus = sync.OnceValues(func() (string, []int32) {
	r := rand.New(rand.NewPCG(0x6c6f6164, 0x67656e))
	var b strings.Builder
	const size = 1 << 18
	b.Grow(size + 64)
	var starts []int32
	for b.Len() < size {
		n := 6 + r.IntN(16)
		for i := range n {
			starts = append(starts, int32(b.Len()))
			w := corpusWords[r.IntN(len(corpusWords))]
			if i == 0 {
				b.WriteString(strings.ToUpper(w[:1]))
				b.WriteString(w[1:])
			} else {
				b.WriteString(w)
			}
			switch {
			case i == n-1:
				b.WriteString(". ")
			case r.IntN(9) == 0:
				b.WriteString(", ")
			default:
				b.WriteByte(' ')
			}
		}
	}
	return b.String(), starts
})

// text returns about n bytes of corpus starting at a word.
func text(r rng, n int) string {
	c, starts := corpus()
	n = min(max(n, 1), len(c)/2)
	s := int(starts[r.IntN(len(starts)/2)])
	return strings.TrimRight(c[s:s+n], " ,")
}
