package wire

import "sync"

// Payload buffers come from size-class pools so that a busy session does not
// allocate per frame, while an idle one holds none. Classes double from 4 KiB
// to MaxFramePayload, so a buffer wastes less than half of itself.
const minClass = 4 << 10

var classSizes = [...]int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10}

var classPools [len(classSizes)]sync.Pool

func init() {
	for i, size := range classSizes {
		classPools[i].New = func() any {
			b := make([]byte, size)
			return &b
		}
	}
}

func classOf(n int) int {
	for i, size := range classSizes {
		if n <= size {
			return i
		}
	}
	return -1
}

// getBuf returns a pooled buffer with len n (n <= MaxFramePayload).
func getBuf(n int) *[]byte {
	c := classOf(n)
	if c < 0 {
		panic("wire: buffer request beyond MaxFramePayload")
	}
	b := classPools[c].Get().(*[]byte)
	*b = (*b)[:n]
	return b
}

// putBuf returns a buffer to its pool. Buffers whose capacity is not a class
// size (none are made here) are dropped.
func putBuf(b *[]byte) {
	if b == nil {
		return
	}
	c := classOf(cap(*b))
	if c < 0 || classSizes[c] != cap(*b) {
		return
	}
	*b = (*b)[:cap(*b)]
	classPools[c].Put(b)
}
