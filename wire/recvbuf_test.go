package wire

import (
	"bytes"
	"testing"
)

// TestRecvBufOrderAndReuse queues records around the ends of the inline
// arrays (more records than recsArr, more blocks than blocksArr, a large
// block between small copies) and reads them back in order, twice on the
// same queue, with a reset between.
func TestRecvBufOrderAndReuse(t *testing.T) {
	var q recvBuf
	for round := range 2 {
		var want [][]byte
		for i := range 9 {
			if i == 4 {
				b := getBuf(smallPayload + 1)
				for j := range *b {
					(*b)[j] = byte(i + j)
				}
				want = append(want, bytes.Clone(*b))
				q.pushBlock(frameData, 0, b)
				continue
			}
			p := bytes.Repeat([]byte{byte('a' + i)}, 1500) // three fill a 4 KiB block
			want = append(want, p)
			q.pushCopy(frameMessage, 0, p)
		}
		for i, w := range want {
			if q.empty() {
				t.Fatalf("round %d: queue empty before record %d", round, i)
			}
			got := make([]byte, q.head().n)
			if n := q.read(got); n != len(w) || !bytes.Equal(got, w) {
				t.Fatalf("round %d: record %d: read %d bytes, want %d (equal %v)", round, i, n, len(w), bytes.Equal(got, w))
			}
			q.popRec()
		}
		// Fully read, it holds no block: an idle stream keeps no memory.
		if !q.empty() || q.size != 0 || len(q.blocks)-q.blkOff != 0 {
			t.Fatalf("round %d: left %d bytes in %d blocks", round, q.size, len(q.blocks)-q.blkOff)
		}
		q.pushCopy(frameData, 0, []byte("x"))
		q.reset()
	}
}

// TestRecvBufSmallStreamAllocatesNothing holds a stream's usual traffic (a
// message and a little data) to no allocation for the queue: its first
// records and blocks live in the recvBuf itself and blocks come pooled.
func TestRecvBufSmallStreamAllocatesNothing(t *testing.T) {
	msg, data := make([]byte, 300), make([]byte, 200)
	out := make([]byte, 300)
	q := new(recvBuf) // a Stream's is part of the Stream's own allocation
	n := testing.AllocsPerRun(200, func() {
		q.reset()
		q.pushCopy(frameMessage, 0, msg)
		q.pushCopy(frameData, 0, data)
		for !q.empty() {
			q.read(out[:q.head().n])
			q.popRec()
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per small stream, want 0", n)
	}
}
