package edge

import (
	"strings"
	"testing"
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
