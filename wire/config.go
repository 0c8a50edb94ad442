package wire

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Heartbeat profile. Both sides ping every DefaultHeartbeatInterval and close
// the session with ReasonHeartbeatTimeout when a ping is not answered within
// DefaultHeartbeatTimeout of being queued. The profile is a transport
// constant, not configuration: long prefills and a slow reader on another
// stream must never look like a dead peer. Tests may shorten it through
// Config.TestHeartbeat.
const (
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultHeartbeatTimeout  = 45 * time.Second
)

// Defaults applied when a Config field is zero.
const (
	DefaultStreamWindow     = 512 << 10
	DefaultMaxStreams       = 1024
	DefaultMaxMessageSize   = 16 << 20
	DefaultWriteTimeout     = 15 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultMaxQueuedControl = 1024
	DefaultResetRate        = 200
	DefaultResetBurst       = 2048
	DefaultCloseLinger      = time.Second

	minStreamWindow = 2 * (maxChunk + headerSize)
	maxStreamWindow = 1 << 30
	// maxMaxStreams bounds MaxStreams: a preface announcing more is
	// refused by the peer.
	maxMaxStreams = 1 << 20
)

// HeartbeatProfile is a heartbeat interval and response wait. Only tests set
// one (Config.TestHeartbeat); production sessions use the default profile.
type HeartbeatProfile struct {
	// Interval between pings.
	Interval time.Duration
	// Timeout is how long a queued ping may go unanswered.
	Timeout time.Duration
}

// Config tunes a Session. The zero value (or a nil *Config) is ready to use;
// each field's comment says what its zero value means. The memory a session
// may hold for received data is bounded by MaxStreams x StreamWindow plus one
// write batch.
type Config struct {
	// StreamWindow is this side's receive window per stream, in bytes of
	// encoded frames. The peer may have at most this much unread payload
	// queued on one stream. Zero means DefaultStreamWindow.
	StreamWindow int
	// MaxStreams is how many concurrent streams the peer may open; more are
	// reset with ResetRefused. Zero means DefaultMaxStreams; at most 2^20,
	// the most a peer accepts.
	MaxStreams int
	// AcceptBacklog is how many opened streams may wait for AcceptStream;
	// more are reset with ResetRefused. Zero means MaxStreams: every stream
	// the peer may open may also wait to be accepted.
	AcceptBacklog int
	// MaxMessageSize bounds one received role message after reassembly.
	// Zero means DefaultMaxMessageSize.
	MaxMessageSize int
	// WriteTimeout is the deadline of every flush; missing it closes the
	// session with ReasonWriteTimeout. Zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// HandshakeTimeout bounds the preface exchange. Zero means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxQueuedControl bounds the control frames the peer can make this
	// side queue (heartbeat responses, refusals); beyond it the session
	// closes with ReasonControlFlood. Zero means DefaultMaxQueuedControl.
	MaxQueuedControl int
	// ResetRate and ResetBurst bound the resets the peer may send of
	// streams it opened less than a second before (rapid reset), as a
	// token bucket (per second, and burst); beyond it the session closes
	// with ReasonResetFlood. Older streams' resets are cancellations of
	// work under way, bounded by MaxStreams, and not counted. Zero means
	// DefaultResetRate and DefaultResetBurst.
	ResetRate  int
	ResetBurst int
	// CloseLinger bounds how long closing waits for the final SessionClose
	// frame to be written and for the peer to close its side, so that the
	// peer reads the reason instead of a connection reset. Zero means
	// DefaultCloseLinger.
	CloseLinger time.Duration
	// Logger receives session events (ids and reasons, never payloads).
	// Nil means silent.
	Logger hclog.Logger
	// TestHeartbeat replaces the heartbeat profile. For tests only; nil
	// means the default 30 s / 45 s profile.
	TestHeartbeat *HeartbeatProfile
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	if c == nil {
		return nil
	}
	var errs []error
	if c.StreamWindow != 0 && (c.StreamWindow < minStreamWindow || c.StreamWindow > maxStreamWindow) {
		errs = append(errs, fmt.Errorf("StreamWindow %d outside [%d, %d]", c.StreamWindow, minStreamWindow, maxStreamWindow))
	}
	if c.MaxStreams < 0 || c.MaxStreams > maxMaxStreams {
		errs = append(errs, fmt.Errorf("MaxStreams %d outside [0, %d]", c.MaxStreams, maxMaxStreams))
	}
	if c.AcceptBacklog < 0 {
		errs = append(errs, fmt.Errorf("AcceptBacklog %d is negative", c.AcceptBacklog))
	}
	if c.MaxMessageSize < 0 {
		errs = append(errs, fmt.Errorf("MaxMessageSize %d is negative", c.MaxMessageSize))
	}
	if c.WriteTimeout < 0 || c.HandshakeTimeout < 0 || c.CloseLinger < 0 {
		errs = append(errs, errors.New("WriteTimeout, HandshakeTimeout and CloseLinger must not be negative"))
	}
	if c.MaxQueuedControl < 0 || c.ResetRate < 0 || c.ResetBurst < 0 {
		errs = append(errs, errors.New("MaxQueuedControl, ResetRate and ResetBurst must not be negative"))
	}
	if h := c.TestHeartbeat; h != nil && (h.Interval <= 0 || h.Timeout <= 0) {
		errs = append(errs, fmt.Errorf("TestHeartbeat %+v must have positive Interval and Timeout", *h))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("wire: config: %w", err)
	}
	return nil
}

// settings is a Config with defaults applied, read once at session start.
type settings struct {
	streamWindow     uint32
	maxStreams       int
	acceptBacklog    int
	maxMessageSize   int
	writeTimeout     time.Duration
	handshakeTimeout time.Duration
	maxQueuedControl int
	resetRate        float64
	resetBurst       float64
	closeLinger      time.Duration
	heartbeat        HeartbeatProfile
	logger           hclog.Logger
}

func (c *Config) settings() settings {
	if c == nil {
		c = &Config{}
	}
	s := settings{
		streamWindow:     uint32(cmp.Or(c.StreamWindow, DefaultStreamWindow)),
		maxStreams:       cmp.Or(c.MaxStreams, DefaultMaxStreams),
		acceptBacklog:    c.AcceptBacklog,
		maxMessageSize:   cmp.Or(c.MaxMessageSize, DefaultMaxMessageSize),
		writeTimeout:     cmp.Or(c.WriteTimeout, DefaultWriteTimeout),
		handshakeTimeout: cmp.Or(c.HandshakeTimeout, DefaultHandshakeTimeout),
		maxQueuedControl: cmp.Or(c.MaxQueuedControl, DefaultMaxQueuedControl),
		resetRate:        float64(cmp.Or(c.ResetRate, DefaultResetRate)),
		resetBurst:       float64(cmp.Or(c.ResetBurst, DefaultResetBurst)),
		closeLinger:      cmp.Or(c.CloseLinger, DefaultCloseLinger),
		heartbeat:        HeartbeatProfile{Interval: DefaultHeartbeatInterval, Timeout: DefaultHeartbeatTimeout},
		logger:           c.Logger,
	}
	if s.acceptBacklog == 0 {
		s.acceptBacklog = s.maxStreams
	}
	if c.TestHeartbeat != nil {
		s.heartbeat = *c.TestHeartbeat
	}
	if s.logger == nil {
		s.logger = hclog.NewNullLogger()
	}
	return s
}
