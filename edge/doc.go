// Package edge holds edge.Server, the gateway and composition root of an
// Edge: the client HTTP APIs (OpenAI Chat Completions, Responses with its
// compaction, Embeddings and Models; Anthropic Messages, count_tokens and
// Models, the last in Anthropic's shape for a request that names an
// anthropic-version; CORS for the browser origins Config.CORSOrigins
// lists; also mountable as an http.Handler in your own server), API keys
// and principals, model routes, admission and leases, the listener for
// Node sessions, and the one dispatch path every API goes through.
//
// A request is authenticated by its API key (stored only as a SHA-256
// hash, compared in constant time), matched to a route, and admitted: it
// waits in FIFO order until a candidate provider (filtered by the route,
// by whether it can serve the API, and by health) has a free slot of its
// configured capacity, or its queue timeout passes (503 with Retry-After).
// At most Config.MaxQueued wait at once, holding at most
// Config.MaxQueuedBytes of bodies together: beyond, a newcomer is refused
// at once (503) unless it ranks above the last in line, which are refused
// in its place, as many as it takes. The slot is a lease bound to the provider and to the Node
// connection generation; it is released exactly once on every terminal
// path. The request then runs on that exact generation in one of three
// ways:
//
//   - a raw tunnel, when the provider's upstream speaks the client's
//     format (nodes.ProviderSpec.APIs, or the adapter's default): only
//     "model" is rewritten, by a byte splice;
//   - a translated tunnel, when it speaks another format: the request is
//     translated into the provider's format (Anthropic Messages, else
//     Chat Completions, else Responses; Responses first for one of
//     OpenAI's reasoning models, Target.ModelClass, since only Responses
//     carries their reasoning from turn to turn) and the answer, streamed
//     or not, back into the client's;
//   - a normalized run (cli providers), rendered in the client's format.
//
// A translated or rendered answer is held whole while it is rendered
// into a buffered body or a Responses stream (whose last events repeat
// it), so it is bounded there: past 32 MiB of answer text it ends with a
// 502 api_error (an error event in a stream). A Chat Completions or
// Anthropic stream keeps only tool arguments (bounded alike) and passes
// text of any length, as a raw tunnel passes an answer of any length.
//
// A translation carries what the provider's format can hold, a JSON output
// format included (Chat's response_format, Responses' text.format,
// Anthropic's output_config.format). A field it cannot carry is refused
// with a 400 that names it, never dropped: n above 1, logprobs,
// logit_bias (its token ids are OpenAI's tokenizer's), audio output, the
// deprecated functions, stop sequences to a Responses provider, JSON mode
// without a schema to Anthropic, a tool input schema that is not an
// object schema or an earlier call's arguments that are not an object to
// Anthropic, state kept at the provider (previous_response_id,
// background, conversation, prompt, mcp_servers, container). What only
// tunes sampling or hints, and that the provider's format lacks, is left
// out (seed, penalties, top_k, verbosity, service tiers, caching hints,
// context_management), as is a reasoning effort or thinking budget for an
// OpenAI model that takes none (GPT-4o, GPT-4.1 and older refuse one), a
// temperature or top_p for one of OpenAI's reasoning models (which refuse
// them), and one of the two for Anthropic when both are given (its newer
// models refuse both; top_p goes unless the temperature is the default):
// the answer keeps its shape. A request translated for Anthropic marks
// its prefix for Anthropic's prompt cache (Target.NoPromptCache), which
// OpenAI's clients do not know to ask for. OpenAI's hosted web search,
// which Codex offers in every request by default, is left out too (and
// an earlier turn's web_search_call item): the model works without
// searching, which asks for no access the client did not grant; a tool
// choice that forces the search, or any other hosted tool, is refused.
// Tool call ids Anthropic's pattern refuses, or longer than OpenAI takes
// (40 bytes in Chat Completions, 64 in Responses), are rewritten for it,
// alike in a call and its result; an end-user id longer than OpenAI's 64
// bytes goes to it as its SHA-256.
// What a Chat Completions provider gives a tool call to be sent back with
// it (Gemini 3's thought signature, in extra_content, without which it
// refuses the next turn of a tool loop) reaches a client of another
// format in the call's id, the one place every client sends back, and
// goes back to such a provider in the call's extra_content (to any model
// but OpenAI's own, which refuse the field); Gemini's parallel calls,
// sent without an index, are told apart by their ids.
// A tool name OpenAI and Anthropic refuse (longer than 64 bytes, or with
// a byte other than a letter, digit, _ or -) is renamed in a translation,
// alike in the tools, the tool choice and the history's calls, and the
// answer's calls of it are given back to the client under its own name;
// two names that would be renamed to one are refused with a 400. Text
// Anthropic refuses and OpenAI takes (empty or all whitespace, as a
// model's "\n\n" before its tool call) is left out for it, and the
// trailing whitespace of a final assistant message (a prefill) trimmed.
// Values no API takes (a negative token limit or temperature, a top_p
// outside [0, 1]), a request with no turn to answer, tools without a name
// or sharing one, a tool choice no tool can answer, and a history whose
// tool calls cannot be paired with their results are refused with a 400
// wherever the request is decoded (translations and runs); a raw tunnel
// leaves them to the upstream, which refuses them itself.
// Which models those are, and which take their limit as
// max_completion_tokens, is read from the target's model name, or given
// by Target.ModelClass for a deployment named otherwise. Anthropic
// requires an output limit: a request translated for it whose client set
// none is sent its target's (Target.MaxTokens), by default the most a
// Claude model writes, so that an answer left unbounded is not cut short.
// A reasoning effort asks a Claude model that thinks adaptively (Opus
// and Sonnet 4.6 and later, the newest of which refuse a thinking budget)
// for thinking {"type": "adaptive"} with output_config.effort, and an
// older one for a budget (Target.Thinking says which for a deployment
// named otherwise); a route's Claude targets of both kinds are each sent
// their own.
// A model that must be given its reasoning back (DeepSeek's thinking
// mode; ModelReasoningContent) gets each assistant message's thinking as
// reasoning_content; no other model is sent the field, which some servers
// refuse. A Responses client that includes reasoning.encrypted_content
// (Codex, which keeps no state at the provider) is given the model's
// thinking, with an Anthropic model's signature, sealed in the reasoning
// item's encrypted_content (a block Anthropic redacted, as its opaque
// data, shown to no client); sent back, it reaches Anthropic as the
// thinking block it was, which Anthropic needs to go on thinking in a
// tool loop, and DeepSeek as its reasoning_content. An OpenAI reasoning
// model, spoken to in Responses, is asked for its reasoning's state
// (include reasoning.encrypted_content), which a client of another format
// is given as its thinking block's signature: Claude Code, sending the
// block back in a tool loop, gives the model its reasoning item back.
// Another provider's reasoning state is not portable and is left out of
// a translation, and a request relayed untranslated to a Responses
// provider goes without the sealed items.
// Claude Code begins its system prompt with a billing line that changes
// with every request (x-anthropic-billing-header), which would make a
// prefix-caching server prefill the whole conversation again each turn:
// it is left out of a translation and of a request relayed untranslated
// to a provider not of category api (llmapi.DropBillingHeader), unless
// its ProviderSpec.BillingHeader says otherwise.
// A Responses custom tool, whose input is free text (Codex's apply_patch),
// is carried as a function with one string parameter, a grammar it names
// in that parameter's description, and its calls come back to the client
// as custom_tool_call items; an allowed_tools choice is carried as just
// the allowed tools. A Responses namespace of tools (Codex groups each
// MCP server's tools so, and gives some of them in an additional_tools
// input item) is carried as functions named namespace__tool
// (llmapi.NamespacedName), and their calls come back under the
// namespace and the tool's own name. Codex's own search of the tools it
// deferred (a tool_search tool it runs itself) is carried as a function,
// the model's search comes back as a tool_search_call, and the tools a
// search loaded are offered from the next turn on; OpenAI's hosted
// search is left out, with the tools it would search offered whole;
// Claude Code's (ToolSearch, whose results are tool_reference blocks)
// reaches the model as text naming the tools found, every tool offered,
// and Anthropic's server-side search is left out as OpenAI's is. A
// message between Codex's agents (an agent_message item) reaches the
// model as a user turn that names its author and recipient.
// The request is encoded for each provider format of its route before it
// is queued, and a provider whose format cannot carry it is no
// candidate: another of the route's providers that can (one that speaks
// the client's format carries everything) serves it, and the 400 comes
// only when none can.
//
// A request body sent compressed (Content-Encoding gzip or deflate) is
// decoded before anything reads it, and the provider is sent plain JSON;
// Config.MaxBodyBytes bounds it as it came and as it decodes (413). A
// body in another coding (zstd, which some agents send to OpenAI's own
// backend) is refused with 415, one that does not decode with 400.
//
// Errors reach the client in its own format: OpenAI's error object, or
// Anthropic's with 529 overloaded_error when no provider has room. A
// provider that fails before its answer begins (an upstream error status;
// a translated answer whose provider reports an error before any content,
// such as a rate limit in a 200 stream, its start held until then; a run the Node cannot start, or
// one that fails before any output, while a stream's head is still held:
// up to the keep-alive interval, since a run's head says nothing until
// output comes) is answered with an HTTP error status (429 for a rate
// limit, 503 or 529 for an overload), streamed request or not, so that
// clients' retry rules see it; except where a stream began without the
// provider's head (below), when the error event ends it. A translated
// refusal of a prompt past the model's context window, in whatever words
// the provider's server uses (llmapi.ContextOverflow), is told as the
// client's format tells it: a message that says the prompt is too long
// (Claude Code's cue to compact its conversation), and to an OpenAI-format
// client the code context_length_exceeded (which Codex reports as such).
// Every 429 and 503 (529) the Edge writes carries Retry-After: a key
// limit's time to its next slot, a translated provider refusal's own
// delay (at most an hour), the queue timeout and a second for a request
// that waited it out (or, sooner, the end of the earliest cooldown among
// its candidates, below), one second otherwise; a provider's error
// relayed untranslated keeps the provider's own headers. Every request
// gets exactly one terminal: a whole answer, an error body, or the
// API's error event in a stream (also when the hard deadline passes, the
// provider's stream breaks off or sends a malformed event); a Responses
// stream whose response was created ends with response.failed, carrying
// the error, the terminal Codex and the SDKs read. A client that
// disconnects cancels the upstream call; silence is never a terminal. A
// silent stream gets a keep-alive every 15 s (Config.KeepAlive), an
// event where the client's format has one, since some clients count
// events, not bytes (Codex's idle timeout, which retries the request
// after 300 s without an event; Claude Code's stall watchdog): an
// Anthropic client a ping, relayed or translated; a Responses client a
// response.in_progress event: in a translated answer the response as it
// stands, started by the first where the provider had not started its
// answer (a slow prefill on a local model says nothing until its first
// token); in one relayed untranslated, once the provider created the
// response, that response as created, the provider's later events
// renumbered to follow (their sequence_number alone is rewritten, and
// only in a stream that fell silent); Chat Completions clients an SSE
// comment (the format has no such event). A provider may also be slow to
// send its head (status and headers): Ollama sends none until its first
// token, after a model load and the prompt's prefill. A stream does not
// wait for it past the keep-alive interval: the client is sent a head of
// the Edge's (200, an event stream) and keep-alives until the provider
// answers: a translated stream begins with its format's start
// (message_start, response.created) and heartbeats; one relayed
// untranslated gets keep-alives that fit before the provider's own start
// (Anthropic's ping, a comment), and the provider's headers (its request
// id, its rate-limit figures) are not passed on. A failure that head
// brings ends the stream with the format's error event. A Responses
// stream relayed untranslated waits for the provider's head, as before:
// nothing of the format may precede the provider's response.created, and
// Codex, which waits for a head, counts no comment once it has one.
//
// Responses' compaction (POST /v1/responses/compact, which Codex calls
// when its built-in OpenAI provider is pointed at the Edge and a
// conversation fills its context) is never streamed. A provider whose
// upstream speaks Responses compacts by itself, untranslated: its answer
// carries its own encrypted state, which only a Responses provider reads
// later (reasoning the Edge sealed for Anthropic is left out of the
// request, as of a Responses request). Any other provider is asked, in
// its own format, for a summary of the conversation (its tools offered,
// none to be called), and the Edge answers as a compaction does: the
// conversation's most recent user messages, as they were (up to
// llmapi.CompactionKeepTokens), then the summary as a user message that
// opens with llmapi.CompactionSummaryPrefix. Those are plain messages,
// which every provider reads; an answer with no text fails with 502 and
// leaves the conversation as it was. The summary's usage is booked as
// the compaction's. Recent Codex versions compact in POST /v1/responses
// instead (a compaction_trigger item ends the input; streamed), and wait
// for one compaction item: the same summary is its encrypted_content,
// which the Edge reads back as the user message of the summary, whether
// the next turn is translated or relayed to a Responses provider. While
// the model writes the summary the client is shown nothing;
// response.in_progress keep-alives go, as on any silent stream.
// Codex so configured also asks for Responses over a WebSocket first: the
// Edge serves Responses over HTTP only and answers the upgrade 426, the
// status Codex falls back to HTTP on at once.
//
// A Node that shuts down gracefully (node.Runtime.Shutdown; the node
// daemon on SIGTERM) sends GOAWAY: from then on nothing new is admitted to
// it (it reports draining, as an operator's drain does) and queued
// requests go to the route's other providers at once, while the work it
// has runs to its end. A request that never reached the Node (its GOAWAY
// crossed the dispatch, or its connection ended before the request left)
// is admitted again, at most three times within its queue timeout; so is
// a run (command-line providers), whose first event the dispatch awaits
// as it awaits a tunnel's head. Once a Node has the request, it is never
// sent elsewhere.
//
// A provider that says "not now" cools: one whose upstream answers 503 or
// 529 (overloaded, a model still loading) gets no free slot for its
// Retry-After in seconds (one second without one, at most a minute); one
// that answers 429 (rate limited), or whose run fails as rate limited,
// gets none for the model it was asked for, since hosted APIs limit each
// model on its own: its other models are served. The refused request
// gets the provider's answer, as always; the requests after it go to the
// route's other providers, or wait in the queue until the cooldown ends,
// rather than meet the same refusal; one whose queue timeout passes first
// gets the time left on the earliest cooldown among its candidates (a
// provider whose Node is gone gives back no slot when its cooldown ends,
// and is not counted) as its Retry-After, when that is shorter than the
// queue timeout. Server.Nodes and the status the Edge reports to its Hub
// carry ProviderSnapshot.CoolingUntil and CoolingModels, and a linked Hub
// is told at once when a cooldown begins or ends (Server.WatchStatus);
// the iop_edge_provider_cooling gauge says which providers (or models of
// them) cool.
//
// An API key's own limits (APIKey: requests and tokens per minute,
// concurrent requests) refuse with 429 and Retry-After before the request
// queues; the access log and iop_edge_requests_total give such a refusal
// the outcome key_limited, apart from a provider's relayed 429
// (rate_limited). Server.Usage gives each key's requests served, tokens
// and refusals by limit, as the iop_edge_key_* metrics do.
//
// Operators see requests through Prometheus metrics (Config.Metrics, on
// /metrics, behind a bearer token with Config.MetricsTokenHash; bounded
// labels), /healthz and /readyz, and, with
// Config.AccessLog, one log line per request as it ends (request ids,
// model, key name, provider, node, status, timings, tokens). The metrics
// also give when the listeners' certificates and each connected Node's
// client certificate expire, to alert before one lapses (a renewed one is
// taken by a reload, and by a Node at its next connection).
//
// Credentials a provider names (nodes.ProviderSpec.Credential) reach its
// Node only as a credential lease per dispatch (package credentiallease),
// bound to the Node's key and connection generation. A revoked credential
// is leased no more at once. Where the configuration a Node still holds
// would refuse a lease the new one allows (a credential rotated right
// after its revocation, a provider enabled again or moved to another
// credential), the provider's requests wait in the queue until the Node
// has applied the change, rather than be refused by it. In managed mode
// (Config.Managed) Nodes register only with an Edge-CA certificate naming
// their id (package edge/identity). OpenWorkspace admits a request to a
// workspace ref on its one Node and generation (package workspace).
//
// Sub-packages make the parts visible: edge/nodes is the node registry and
// the dispatch seam to Nodes, edge/pool is admission, edge/identity the
// workload-identity CA.
//
// # Metrics
//
// With Config.Metrics set, /metrics serves these series. Every label is
// bounded by the configuration (route, key, node and provider names, and
// the fixed sets below); request ids, prompts and secrets never become
// labels. Route "unknown" counts requests that named no configured route
// (or were refused before one was found).
//
//   - iop_edge_requests_total{route, api, outcome}: requests by their end.
//     api is chat, responses, responses_compact, embeddings or messages.
//     outcome is ok;
//     canceled (the client left before an answer began); unauthenticated;
//     key_limited (the key's own limits, 429); rate_limited (a provider's
//     relayed 429); overloaded (no provider available, or the queue
//     timeout passed); queue_full; timeout (the hard deadline, 504);
//     client_error (another 4xx); or upstream_error (another 5xx).
//   - iop_edge_request_duration_seconds{route, api}: from request to its
//     last byte.
//   - iop_edge_time_to_first_token_seconds{route, api}: from request to the
//     first event of a streamed answer.
//   - iop_edge_queue_wait_seconds{route}: how long admitted requests waited
//     for a slot.
//   - iop_edge_queue_depth, iop_edge_queue_max: requests waiting now, and
//     Config.MaxQueued.
//   - iop_edge_queue_bytes, iop_edge_queue_max_bytes: the body bytes they
//     hold, and Config.MaxQueuedBytes.
//   - iop_edge_in_flight{node, provider}, iop_edge_provider_queued{node,
//     provider}: admitted requests running on a provider, and queued ones
//     that could run there.
//   - iop_edge_provider_cooling{node, provider}: 1 while a provider, or one
//     of its models, cools after a 429, 503 or 529.
//   - iop_edge_node_connected{node}, iop_edge_node_generation{node},
//     iop_edge_node_draining{node}: each configured Node's connection.
//   - iop_edge_tls_certificate_expiry_timestamp_seconds{listener} (api,
//     nodes) and iop_edge_node_certificate_expiry_timestamp_seconds{node}:
//     when certificates expire, in Unix seconds.
//   - iop_edge_tokens_total{key, direction}: tokens from reported usage
//     (direction input or output).
//   - iop_edge_key_requests_total{key}, iop_edge_key_limited_total{key,
//     limit}, iop_edge_key_estimated_tokens_total{key},
//     iop_edge_key_cached_input_tokens_total{key}: Server.Usage per key;
//     limit is concurrent, requests or tokens; the cached input tokens are
//     the part of the input a provider read from its prompt cache.
//   - iop_edge_tunnel_bytes_total{direction}: bytes through raw tunnels
//     (upstream: to the provider; downstream: to the client).
//   - iop_edge_credential_leases_issued_total{provider}: credential leases
//     issued.
//
// The Edge is the source of truth for its Nodes and their providers. It
// must never replay a request or move it to another provider once
// dispatched (a stream the Node refused unopened was not), never let a
// lease be released twice or not at all, never let work bound to an ended
// connection generation complete, and never log a key, a prompt or model
// output.
package edge
