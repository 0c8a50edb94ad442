// Package faulttest holds the fault, load and soak harness's shared parts:
// a client that classifies every answer by its terminal (exactly one per
// request, in the API's own shape, or it counts as lost), a scraper for
// the Edge's Prometheus metrics, and the report table.
package faulttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Outcome classifies one request's answer.
type Outcome int

// Outcomes. Complete, Failed and Refused are terminals; Lost is not.
const (
	// Complete: the answer ended normally (a whole JSON body; a stream's
	// final event).
	Complete Outcome = iota + 1
	// Failed: the answer ended with an error in the API's shape (an error
	// body, a mid-stream error event).
	Failed
	// Refused: an HTTP error status with an error body before any answer
	// (4xx, 5xx).
	Refused
	// Lost: no terminal (the connection ended without one, the body was
	// not the API's shape, more than one terminal, or the client gave up).
	Lost
)

func (o Outcome) String() string {
	return [...]string{"?", "complete", "failed", "refused", "lost"}[o]
}

// Result is one request's classified answer.
type Result struct {
	Outcome    Outcome
	Status     int
	RetryAfter string
	Terminals  int
	Latency    time.Duration
	Detail     string
}

// Chat sends one OpenAI Chat Completions request (streamed or not) and
// classifies the answer. ctx bounds it: a request still unanswered when
// ctx ends is Lost. read, when set, paces the client's reads (a slow
// reader) with a pause between 1-byte reads.
func Chat(ctx context.Context, c *http.Client, base, key, model, prompt string, stream bool, slow time.Duration) Result {
	start := time.Now()
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%q}]}`, model, stream, prompt)
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return Result{Outcome: Lost, Latency: time.Since(start), Detail: err.Error()}
	}
	defer resp.Body.Close()
	res := Result{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	var rd io.Reader = resp.Body
	if slow > 0 {
		rd = &slowReader{ctx: ctx, r: resp.Body, pause: slow}
	}
	if resp.StatusCode != 200 {
		var e struct {
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.NewDecoder(rd).Decode(&e) == nil && e.Error != nil {
			res.Outcome, res.Terminals = Refused, 1
		} else {
			res.Outcome, res.Detail = Lost, "an error status without an error body"
		}
		res.Latency = time.Since(start)
		return res
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var m map[string]json.RawMessage
		switch err := json.NewDecoder(rd).Decode(&m); {
		case err != nil:
			res.Outcome, res.Detail = Lost, "body: "+err.Error()
		case m["error"] != nil:
			res.Outcome, res.Terminals = Failed, 1
		case m["choices"] != nil:
			res.Outcome, res.Terminals = Complete, 1
		default:
			res.Outcome, res.Detail = Lost, "a body that is neither an answer nor an error"
		}
		res.Latency = time.Since(start)
		return res
	}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	done, failed := 0, 0
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		switch {
		case data == "[DONE]":
			done++
		case strings.HasPrefix(data, `{"error"`):
			failed++
		}
	}
	res.Terminals = done + failed
	res.Latency = time.Since(start)
	switch {
	case res.Terminals != 1:
		res.Outcome, res.Detail = Lost, fmt.Sprintf("%d terminals (%v)", res.Terminals, sc.Err())
	case done == 1:
		res.Outcome = Complete
	default:
		res.Outcome = Failed
	}
	return res
}

// Messages sends one Anthropic Messages request (streamed or not) and
// classifies the answer: a stream ends with message_stop or an error
// event; a body is a message or an error object.
func Messages(ctx context.Context, c *http.Client, base, key, model, prompt string, stream bool) Result {
	start := time.Now()
	body := fmt.Sprintf(`{"model":%q,"max_tokens":256,"stream":%v,"messages":[{"role":"user","content":%q}]}`, model, stream, prompt)
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return Result{Outcome: Lost, Latency: time.Since(start), Detail: err.Error()}
	}
	defer resp.Body.Close()
	res := Result{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var m struct {
			Type string `json:"type"`
		}
		switch err := json.NewDecoder(resp.Body).Decode(&m); {
		case err != nil:
			res.Outcome, res.Detail = Lost, "body: "+err.Error()
		case m.Type == "error" && resp.StatusCode != 200:
			res.Outcome, res.Terminals = Refused, 1
		case m.Type == "message" && resp.StatusCode == 200:
			res.Outcome, res.Terminals = Complete, 1
		default:
			res.Outcome, res.Detail = Lost, fmt.Sprintf("a %d body of type %q", resp.StatusCode, m.Type)
		}
		res.Latency = time.Since(start)
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	stops, errs := 0, 0
	for sc.Scan() {
		switch sc.Text() {
		case "event: message_stop":
			stops++
		case "event: error":
			errs++
		}
	}
	res.Terminals = stops + errs
	res.Latency = time.Since(start)
	switch {
	case res.Terminals != 1:
		res.Outcome, res.Detail = Lost, fmt.Sprintf("%d terminals (%v)", res.Terminals, sc.Err())
	case stops == 1:
		res.Outcome = Complete
	default:
		res.Outcome = Failed
	}
	return res
}

type slowReader struct {
	ctx   context.Context
	r     io.Reader
	pause time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	t := time.NewTimer(s.pause)
	select {
	case <-t.C:
	case <-s.ctx.Done():
		t.Stop()
		return 0, s.ctx.Err()
	}
	if len(p) > 1 {
		p = p[:1]
	}
	return s.r.Read(p)
}

// Tally counts outcomes and latencies of a scenario's requests.
type Tally struct {
	mu        sync.Mutex
	Requests  int
	ByOutcome map[Outcome]int
	Statuses  map[int]int
	latencies []time.Duration
	Details   []string
}

// Add records a result.
func (t *Tally) Add(r Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ByOutcome == nil {
		t.ByOutcome, t.Statuses = map[Outcome]int{}, map[int]int{}
	}
	t.Requests++
	t.ByOutcome[r.Outcome]++
	t.Statuses[r.Status]++
	t.latencies = append(t.latencies, r.Latency)
	if r.Outcome == Lost && len(t.Details) < 5 {
		t.Details = append(t.Details, r.Detail)
	}
}

// Merge adds o's requests to t.
func (t *Tally) Merge(o *Tally) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ByOutcome == nil {
		t.ByOutcome, t.Statuses = map[Outcome]int{}, map[int]int{}
	}
	t.Requests += o.Requests
	for k, v := range o.ByOutcome {
		t.ByOutcome[k] += v
	}
	for k, v := range o.Statuses {
		t.Statuses[k] += v
	}
	t.latencies = append(t.latencies, o.latencies...)
	t.Details = append(t.Details, o.Details...)
}

// Terminals is the number of requests with exactly one terminal.
func (t *Tally) Terminals() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ByOutcome[Complete] + t.ByOutcome[Failed] + t.ByOutcome[Refused]
}

// Lost is the number of requests without a terminal.
func (t *Tally) Lost() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ByOutcome[Lost]
}

// P99 is the 99th-percentile latency.
func (t *Tally) P99() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.latencies) == 0 {
		return 0
	}
	l := slices.Clone(t.latencies)
	slices.Sort(l)
	return l[(len(l)*99+99)/100-1]
}

// Row is one scenario in the report.
type Row struct {
	Scenario     string
	Requests     int
	Terminals    int
	Lost         int
	LeakedLeases int
	P99          time.Duration
	Note         string
}

// RowOf builds a row from a tally and the leases still held afterwards.
func RowOf(name string, t *Tally, leaked int, note string) Row {
	return Row{Scenario: name, Requests: t.Requests, Terminals: t.Terminals(), Lost: t.Lost(), LeakedLeases: leaked, P99: t.P99(), Note: note}
}

// Print writes rows as a table.
func Print(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "| scenario\t| requests\t| terminals\t| lost\t| leaked leases\t| p99\t| note\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
	for _, r := range rows {
		fmt.Fprintf(tw, "| %s\t| %d\t| %d\t| %d\t| %d\t| %s\t| %s\t|\n", r.Scenario, r.Requests, r.Terminals, r.Lost, r.LeakedLeases, r.P99.Round(time.Millisecond), r.Note)
	}
	tw.Flush()
}

// Metrics is a scrape of an Edge's /metrics.
type Metrics map[string]float64

// Scrape reads /metrics from base into series keyed by name{labels}.
func Scrape(ctx context.Context, base string) (Metrics, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := Metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// Sum adds every series whose key starts with prefix.
func (m Metrics) Sum(prefix string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += v
		}
	}
	return s
}
