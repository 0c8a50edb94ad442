package feed

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errResync, errClosed = errors.New("resync"), errors.New("closed")

func TestSub(t *testing.T) {
	s := NewSub[int](2, errResync, errClosed)
	ctx := context.Background()
	s.Push(1)
	s.Push(2)
	if e, err := s.Next(ctx); e != 1 || err != nil {
		t.Fatalf("%d %v", e, err)
	}
	s.Push(3)
	s.Push(4) // full: dropped, resync
	s.Push(5) // pending resync: dropped too
	if _, err := s.Next(ctx); err != errResync {
		t.Fatalf("want a resync, got %v", err)
	}
	if _, ok, err := s.Poll(); ok || err != nil {
		t.Fatalf("events kept across a resync: %v %v", ok, err)
	}
	s.Push(6)
	if e, _ := s.Next(ctx); e != 6 {
		t.Fatalf("after the resync: %d", e)
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := s.Next(tctx); err != context.DeadlineExceeded {
		t.Fatalf("an empty feed: %v", err)
	}
	s.Push(7)
	s.Shut()
	s.Push(8) // after Shut: not delivered
	if e, err := s.Next(ctx); e != 7 || err != nil {
		t.Fatalf("drain before close: %d %v", e, err)
	}
	if _, err := s.Next(ctx); err != errClosed {
		t.Fatalf("after Shut: %v", err)
	}
}
