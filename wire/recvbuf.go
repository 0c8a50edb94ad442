package wire

// recvBuf queues a stream's received payload in arrival order without
// blocking the session reader. Records say how the payload bytes split into
// DATA runs and MESSAGE fragments; the bytes live in pooled blocks. Small
// payloads are copied into the tail block; large ones arrive in their own
// pooled buffer and are linked in without a copy. Its memory is therefore
// bounded by the stream window (a record costs less than the frame header it
// replaces, and a block wastes less than half of itself), and an idle stream
// holds no block at all.
//
// Each block's len is its count of valid bytes; the tail block takes further
// small payloads while len < cap.
type recvBuf struct {
	recs   []rec
	recOff int // index of the head record in recs
	blocks []*[]byte
	blkOff int // index of the head block
	rpos   int // read offset in the head block
	size   int // unread payload bytes

	// The first arrays of recs and blocks: a stream's usual few frames
	// then cost no allocation for the queue itself.
	recsArr   [4]rec
	blocksArr [2]*[]byte
}

// rec describes one received frame's payload.
type rec struct {
	typ   frameType // frameData or frameMessage
	flags uint8     // flagMore for a continued message fragment
	n     int       // unread payload bytes of this record
	hdr   bool      // the header's credit has not been returned yet
}

// smallPayload is the largest payload copied into the tail block; larger
// ones are read into their own pooled buffer and linked.
const smallPayload = 2 << 10

func (q *recvBuf) empty() bool { return q.recOff == len(q.recs) }

func (q *recvBuf) head() *rec { return &q.recs[q.recOff] }

func (q *recvBuf) tail() *[]byte {
	if len(q.blocks) == q.blkOff {
		return nil
	}
	return q.blocks[len(q.blocks)-1]
}

// pushCopy appends a record whose payload is copied from p.
func (q *recvBuf) pushCopy(typ frameType, flags uint8, p []byte) {
	q.pushRec(rec{typ: typ, flags: flags, n: len(p), hdr: true})
	q.size += len(p)
	for len(p) > 0 {
		t := q.tail()
		if t == nil || len(*t) == cap(*t) {
			t = getBuf(minClass)
			*t = (*t)[:0]
			q.pushBlockPtr(t)
		}
		n := min(cap(*t)-len(*t), len(p))
		*t = append(*t, p[:n]...)
		p = p[n:]
	}
}

// pushBlock appends a record whose payload is all of *b, taking ownership.
func (q *recvBuf) pushBlock(typ frameType, flags uint8, b *[]byte) {
	q.pushRec(rec{typ: typ, flags: flags, n: len(*b), hdr: true})
	if len(*b) == 0 {
		putBuf(b)
		return
	}
	q.size += len(*b)
	q.pushBlockPtr(b)
}

func (q *recvBuf) pushRec(r rec) {
	if q.recs == nil {
		q.recs = q.recsArr[:0]
	}
	q.recs = append(q.recs, r)
}

func (q *recvBuf) pushBlockPtr(b *[]byte) {
	if q.blocks == nil {
		q.blocks = q.blocksArr[:0]
	}
	q.blocks = append(q.blocks, b)
}

// read copies up to len(p) payload bytes of the head record into p and
// returns the count. The caller checked that the head record exists.
func (q *recvBuf) read(p []byte) int {
	r := q.head()
	if len(p) > r.n {
		p = p[:r.n]
	}
	total := 0
	for len(p) > 0 {
		blk := *q.blocks[q.blkOff]
		n := copy(p, blk[q.rpos:])
		q.rpos += n
		total += n
		p = p[n:]
		if q.rpos == len(blk) {
			q.dropHeadBlock()
		}
	}
	r.n -= total
	q.size -= total
	return total
}

// dropHeadBlock releases the fully read head block, unless it is the tail
// and can still take writes.
func (q *recvBuf) dropHeadBlock() {
	b := q.blocks[q.blkOff]
	if q.blkOff == len(q.blocks)-1 && len(*b) < cap(*b) {
		return
	}
	putBuf(b)
	q.blocks[q.blkOff] = nil
	q.blkOff++
	q.rpos = 0
	if q.blkOff == len(q.blocks) {
		q.blocks = q.blocks[:0]
		q.blkOff = 0
	} else if q.blkOff >= 16 && q.blkOff*2 >= len(q.blocks) {
		// Under steady flow the queue never empties; slide it down so the
		// slice does not grow without bound.
		n := copy(q.blocks, q.blocks[q.blkOff:])
		clear(q.blocks[n:])
		q.blocks = q.blocks[:n]
		q.blkOff = 0
	}
}

// popRec removes the head record, which must be fully read.
func (q *recvBuf) popRec() {
	q.recs[q.recOff] = rec{}
	q.recOff++
	if q.recOff == len(q.recs) {
		q.recs = q.recs[:0]
		q.recOff = 0
		// Release a tail block that is fully read: an idle stream holds
		// nothing. (Blocks before blkOff are already released.)
		if len(q.blocks)-q.blkOff == 1 && q.rpos == len(*q.blocks[q.blkOff]) {
			putBuf(q.blocks[q.blkOff])
			clear(q.blocks)
			q.blocks = q.blocks[:0]
			q.blkOff, q.rpos = 0, 0
		}
	} else if q.recOff >= 64 && q.recOff*2 >= len(q.recs) {
		n := copy(q.recs, q.recs[q.recOff:])
		clear(q.recs[n:])
		q.recs = q.recs[:n]
		q.recOff = 0
	}
}

// reset releases every block and record.
func (q *recvBuf) reset() {
	for i := q.blkOff; i < len(q.blocks); i++ {
		putBuf(q.blocks[i])
	}
	*q = recvBuf{}
}
