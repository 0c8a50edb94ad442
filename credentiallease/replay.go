package credentiallease

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"time"
)

// maxReplayEntries bounds the cache; when it is full of unexpired leases,
// new ones are refused (fail closed) rather than forgotten.
const maxReplayEntries = 1 << 20

// minCompactLines is how many lines the file gains before a use first
// considers dropping expired entries (see ReplayCache.appended).
const minCompactLines = 4096

// ReplayCache remembers used lease ids until they expire (plus the skew),
// so a lease opens once. With a file (OpenReplayFile) it survives a
// restart: every use is written and synced before the secret is opened,
// and the highest time the Node acted at is kept with it.
type ReplayCache struct {
	mu   sync.Mutex
	used map[[16]byte]time.Time
	hw   time.Time
	// f appends to the file at path; it is nil once closed, and after a
	// failed write whose repair failed too (the next use tries again).
	f      *os.File
	path   string
	closed bool
	// kept is how many entries the last sweep kept, and appended how
	// many uses came since. When appended reaches kept (and at least
	// minCompactLines), the expired entries are dropped and the file is
	// rewritten with the rest: a Node that runs for months keeps a file
	// and a map of about twice the leases still live (a lease lives at
	// most MaxTTL plus the skew), at an amortized cost of a line or two
	// rewritten per use.
	kept, appended int
}

// NewReplayCache returns a cache in memory only: a restart forgets it.
// Use it only where the Opener's key does not outlive the process.
func NewReplayCache() *ReplayCache { return &ReplayCache{used: map[[16]byte]time.Time{}} }

// ErrReplayFile is returned for a replay file that cannot be trusted.
var ErrReplayFile = errors.New("credentiallease: unusable replay file")

// OpenReplayFile loads (or creates, mode 0600) the replay file at path and
// appends to it from then on. NewOpener drops the entries that expired by
// its own clock, rewriting the file, and the cache does so again whenever
// the file has grown by as many lines as it kept (4096 at least), so the
// file stays about twice the size of the leases still live. A torn last
// line (a crash mid-write) is ignored; any other damage is an error,
// never skipped.
func OpenReplayFile(path string) (*ReplayCache, error) {
	c := NewReplayCache()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err == nil {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%w: %s has mode %v (want 0600)", ErrReplayFile, path, st.Mode().Perm())
		}
	}
	lines := bytes.Split(b, []byte{'\n'})
	for i, ln := range lines {
		if len(ln) == 0 {
			continue
		}
		if i == len(lines)-1 { // no newline after it: torn write
			break
		}
		id, until, at, ok := parseReplayLine(ln)
		if !ok {
			return nil, fmt.Errorf("%w: %s: line %d is damaged", ErrReplayFile, path, i+1)
		}
		c.used[id] = until
		if at.After(c.hw) {
			c.hw = at
		}
	}
	c.path = path
	c.kept = len(c.used)
	if err := c.rewrite(); err != nil {
		return nil, err
	}
	return c, nil
}

// compact drops entries that expired by now and rewrites the file (the
// Opener calls it with its own clock).
func (c *ReplayCache) compact(now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errReplayClosed
	}
	if c.hw.After(now) {
		now = c.hw
	}
	c.dropExpiredLocked(now)
	c.kept, c.appended = len(c.used), 0
	if c.path == "" {
		return nil
	}
	return c.rewrite()
}

// rewrite replaces the file with the current entries (atomically) and
// reopens it for appending. Called with c.mu held or before c is shared.
func (c *ReplayCache) rewrite() error {
	var keep bytes.Buffer
	for id, until := range c.used {
		keep.Write(replayLine(id, until, c.hw))
	}
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
	if err := writeKeyFile(c.path, keep.Bytes()); err != nil {
		return err
	}
	f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	c.f = f
	return nil
}

// errReplayClosed is the detail of a use refused after Close.
var errReplayClosed = errors.New("replay cache closed")

// Close closes the file. Every use after Close is refused: one the cache
// could not record would open again after a restart.
func (c *ReplayCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	return err
}

func (c *ReplayCache) highWater() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hw
}

// use marks id used until until; it fails if it already was. Exactly one
// of concurrent calls with the same id succeeds.
func (c *ReplayCache) use(id [16]byte, until, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u, seen := c.used[id]; seen && u.After(now) {
		return &RefusedError{Reason: ErrReplayed}
	}
	if len(c.used) >= maxReplayEntries {
		c.dropExpiredLocked(now)
		if len(c.used) >= maxReplayEntries {
			return refuse(ErrReplayed, "replay cache full")
		}
	}
	hw := c.hw
	if now.After(hw) {
		hw = now
	}
	if err := c.record(replayLine(id, until, hw)); err != nil {
		// Not recorded, so not opened: a restart could not refuse it.
		return refuse(ErrReplayed, "replay file: %v", err)
	}
	c.hw = hw
	c.used[id] = until
	c.appended++
	if c.appended >= max(minCompactLines, c.kept) {
		c.dropExpiredLocked(hw)
		c.kept, c.appended = len(c.used), 0
		if c.path != "" {
			// A failed rewrite loses nothing: the old file is still
			// whole (atomicfile), and with no file open the next use
			// repairs first.
			c.rewrite()
		}
	}
	return nil
}

// dropExpiredLocked forgets the entries expired at now. Called with c.mu
// held.
func (c *ReplayCache) dropExpiredLocked(now time.Time) {
	for k, u := range c.used {
		if !u.After(now) {
			delete(c.used, k)
		}
	}
}

// record appends line to the file and syncs it; a cache in memory only
// records nothing. A failed write may leave part of the line behind, and
// the next line would be appended to that part, damaging the file for the
// next load: so the file is rewritten from the entries recorded so far
// (dropping the part) before another line goes in. Called with c.mu held.
func (c *ReplayCache) record(line []byte) error {
	switch {
	case c.closed:
		return errReplayClosed
	case c.path == "":
		return nil
	case c.f == nil:
		// The repair after an earlier failure failed too (a disk still
		// full); until it succeeds, nothing is recorded.
		if err := c.rewrite(); err != nil {
			return err
		}
	}
	_, err := c.f.Write(line)
	if err == nil {
		err = c.f.Sync()
	}
	if err != nil {
		c.rewrite() // on failure c.f stays nil: the next use repairs first
		return err
	}
	return nil
}

func replayLine(id [16]byte, until, at time.Time) []byte {
	return fmt.Appendf(nil, "%s %d %d\n", hex.EncodeToString(id[:]), until.UnixMilli(), at.UnixMilli())
}

func parseReplayLine(ln []byte) (id [16]byte, until, at time.Time, ok bool) {
	f := bytes.Fields(ln)
	if len(f) != 3 || len(f[0]) != 32 {
		return id, until, at, false
	}
	if _, err := hex.Decode(id[:], f[0]); err != nil {
		return id, until, at, false
	}
	u, err1 := strconv.ParseInt(string(f[1]), 10, 64)
	a, err2 := strconv.ParseInt(string(f[2]), 10, 64)
	if err1 != nil || err2 != nil {
		return id, until, at, false
	}
	return id, time.UnixMilli(u), time.UnixMilli(a), true
}
