package edge

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/iop-dev/iop/internal/llmapi/llmapitest"
	"github.com/iop-dev/iop/internal/sse"
)

// TestResponseIdIsNotTakenOver: a provider that hands out an id another
// key's response already holds does not move that response: its owner
// still reaches it, and the newcomer does not. The owner may remember it
// again (a provider of its own may move).
func TestResponseIdIsNotTakenOver(t *testing.T) {
	var x responseIndex
	if x.remember("resp_1", "n1", "p1", "alice") {
		t.Fatal("a new id was said to be held")
	}
	if !x.remember("resp_1", "n2", "p2", "bob") {
		t.Fatal("another key took the id over")
	}
	if node, provider, ok := x.lookup("resp_1", "alice"); !ok || node != "n1" || provider != "p1" {
		t.Fatalf("the owner's lookup: %q %q %v", node, provider, ok)
	}
	if _, _, ok := x.lookup("resp_1", "bob"); ok {
		t.Fatal("the newcomer reads the owner's response")
	}
	if x.remember("resp_1", "n3", "p3", "alice") {
		t.Fatal("the owner could not remember its id again")
	}
	// An id too long to keep is dropped, and held by no one: the Edge
	// warns only about a takeover.
	if x.remember(strings.Repeat("r", 300), "n1", "p1", "bob") {
		t.Fatal("an over-long id was said to be held")
	}
	if node, _, _ := x.lookup("resp_1", "alice"); node != "n3" || len(x.order) != 1 {
		t.Fatalf("after the owner's update: node %q, %d ids", node, len(x.order))
	}
}

// TestPassedThroughHeartbeat: a Responses stream relayed untranslated
// gets, in a silence after its response was created, a
// response.in_progress event numbered next, for that response as
// created; the provider's later events are renumbered to follow it (the
// top-level sequence_number only), and an event without a number, or
// with one that is not an integer, passes as it came.
func TestPassedThroughHeartbeat(t *testing.T) {
	var c createdResponse
	for _, ev := range []sse.Event{
		{Type: "response.created", Data: []byte(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_up","object":"response","created_at":7,"model":"up-model","status":"in_progress","output":[]}}`)},
		{Type: "response.in_progress", Data: []byte(`{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_up"}}`)},
	} {
		c.note(ev)
	}
	var hb struct {
		Type     string `json:"type"`
		Seq      int    `json:"sequence_number"`
		Response struct {
			ID, Object, Status, Model string
			CreatedAt                 int64 `json:"created_at"`
			Output                    []any
		}
	}
	evs := llmapitest.Events(t, append(c.heartbeat(), c.heartbeat()...))
	for i, ev := range evs {
		if err := json.Unmarshal(ev.Data, &hb); err != nil || ev.Type != "response.in_progress" || hb.Type != ev.Type || hb.Seq != 2+i {
			t.Fatalf("heartbeat %d: %s %s (%v)", i, ev.Type, ev.Data, err)
		}
		if r := hb.Response; r.ID != "resp_up" || r.Object != "response" || r.Status != "in_progress" || r.Model != "up-model" || r.CreatedAt != 7 || r.Output == nil {
			t.Fatalf("heartbeat %d's response: %s", i, ev.Data)
		}
	}
	for in, want := range map[string]string{
		`{"type":"response.output_item.added","sequence_number":2,"item":{"sequence_number":9}}`: `{"type":"response.output_item.added","sequence_number":4,"item":{"sequence_number":9}}`,
		`{"sequence_number": 10 ,"type":"y"}`:                                                    `{"sequence_number": 12 ,"type":"y"}`,
		`{"type":"z"}`:                                                                           `{"type":"z"}`,
		`{"type":"z","sequence_number":2.5}`:                                                     `{"type":"z","sequence_number":2.5}`,
	} {
		if got := string(c.renumber([]byte(in))); got != want {
			t.Errorf("renumber(%s) = %s, want %s", in, got, want)
		}
	}
}
