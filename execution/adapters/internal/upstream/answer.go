package upstream

import (
	"context"
	"fmt"
	"io"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/llmapi"
)

// ReadWhole reads a whole answer of at most MaxAnswer bytes for a
// buffered decoder (llmapi.DecodeChat, DecodeAnthropic). A failure is
// classed Provider, or is ctx's own once ctx has ended.
func ReadWhole(ctx context.Context, body io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(body, MaxAnswer+1))
	switch {
	case ctx.Err() != nil:
		return nil, execution.Classify(ctx, ctx.Err())
	case err != nil:
		return nil, &execution.Failure{Class: execution.FailureProvider, Message: "upstream answer broke off"}
	case len(b) > MaxAnswer:
		return nil, &execution.Failure{Class: execution.FailureProvider, Message: "upstream answer too large"}
	}
	return b, nil
}

// Relay writes the answer dec decodes (a provider's own API format, by
// the decoders the Edge translates with) to w as run events, and returns
// the run's result: text and reasoning as deltas as they come, each tool
// call whole when its block ends, the usage once, before the result. The
// tool calls' arguments, all calls together, are bounded by MaxAnswer.
// An error the answer reports is the run's failure, classed by its type;
// once ctx has ended, the failure is ctx's own. dec is released.
func Relay(ctx context.Context, dec llmapi.Decoder, w execution.EventWriter) (execution.Result, error) {
	defer dec.Release()
	type call struct {
		id, name string
		args     []byte
	}
	calls := map[int]*call{} // open tool-use blocks by canonical index
	held := 0                // argument bytes held, all calls together
	var usage *execution.Usage
	for {
		ev, err := dec.Next()
		if err != nil {
			// The decoders end with a terminal event; only a read that
			// timed out (a deadline set on the body) is returned.
			if ctx.Err() != nil {
				return execution.Result{}, execution.Classify(ctx, ctx.Err())
			}
			return execution.Result{}, &execution.Failure{Class: execution.FailureProvider, Message: "upstream answer broke off"}
		}
		var out *execution.Event
		switch ev.Kind {
		case llmapi.EvBlockStart:
			if ev.Block == llmapi.BlockToolUse {
				calls[ev.Index] = &call{id: ev.ToolID, name: ev.Name}
			}
		case llmapi.EvDelta:
			switch ev.Block {
			case llmapi.BlockText:
				if ev.Text != "" {
					out = &execution.Event{Kind: execution.EventDelta, Text: ev.Text}
				}
			case llmapi.BlockThinking:
				if ev.Text != "" { // a signature alone has no place in a run
					out = &execution.Event{Kind: execution.EventDelta, Text: ev.Text, Reasoning: true}
				}
			case llmapi.BlockToolUse:
				if c := calls[ev.Index]; c != nil {
					if held += len(ev.Text); held > MaxAnswer {
						return execution.Result{}, &execution.Failure{Class: execution.FailureProvider, Message: "tool call arguments too large"}
					}
					c.args = append(c.args, ev.Text...)
				}
			}
		case llmapi.EvBlockStop:
			if c := calls[ev.Index]; c != nil {
				delete(calls, ev.Index)
				args := string(c.args)
				if args == "" {
					args = "{}"
				}
				out = &execution.Event{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{ID: c.id, Name: c.name, Arguments: args}}
			}
		case llmapi.EvUsage:
			u := ev.Usage
			usage = &execution.Usage{InputTokens: u.Input, OutputTokens: u.Output, CachedInputTokens: u.Cached, ReasoningTokens: u.Reasoning}
		case llmapi.EvStop:
			if usage != nil {
				if err := w.WriteEvent(execution.Event{Kind: execution.EventUsage, Usage: usage}); err != nil {
					return execution.Result{}, err
				}
			}
			return execution.Result{StopReason: runStop(ev.Reason)}, nil
		case llmapi.EvError:
			if ctx.Err() != nil {
				return execution.Result{}, execution.Classify(ctx, ctx.Err())
			}
			return execution.Result{}, answerFailure(ev.Err)
		}
		if out != nil {
			if err := w.WriteEvent(*out); err != nil {
				return execution.Result{}, err
			}
		}
	}
}

// runStop is a canonical stop reason as a run reports it.
func runStop(r llmapi.StopReason) string {
	switch r {
	case llmapi.StopLength:
		return "length"
	case llmapi.StopToolUse:
		return "tool_calls"
	case llmapi.StopRefusal:
		return "content_filter"
	}
	return "stop"
}

// answerFailure is the failure an error in a provider's answer stands for:
// classed by its canonical type, with the decoder's note (which names no
// secret: it never repeats the provider's message).
func answerFailure(e *llmapi.APIError) *execution.Failure {
	if e == nil {
		return &execution.Failure{Class: execution.FailureProvider, Message: "upstream error"}
	}
	class := execution.FailureProvider
	switch e.Type {
	case "rate_limit":
		class = execution.FailureRateLimited
	case "overloaded":
		class = execution.FailureUnavailable
	case "invalid_request":
		class = execution.FailureInvalidRequest
	}
	msg := e.Message
	if e.Type != "api_error" {
		msg = fmt.Sprintf("%s (%s)", msg, e.Type)
	}
	return &execution.Failure{Class: class, Message: msg}
}
