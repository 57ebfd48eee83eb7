package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// run is what a handler's context carries for Logger and Step (one per
// handler call): the attempt's log, kept up to maxLog bytes and written
// with the attempt's outcome, and the job's step checkpoints, read at the
// first Step. A handler that logs nothing and uses no step costs the
// struct and its context value, and no statement.
type run struct {
	w   *Worker
	job *pgmsgtype.Job

	mu  sync.Mutex
	log []byte
	cut bool
	// steps are the job's checkpoints by name (nil until read).
	steps map[string]json.RawMessage
}

type runKey struct{}

func runOf(ctx context.Context) *run {
	r, _ := ctx.Value(runKey{}).(*run)
	return r
}

// text is the attempt's log ("" when nothing was logged), with a last line
// that says so when it was cut.
func (r *run) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		return string(r.log) + truncatedLine(r.w.cfg.MaxLogBytes)
	}
	return string(r.log)
}

func truncatedLine(limit int) string {
	return "[pgmsg: log truncated at " + strconv.Itoa(limit) + " bytes]\n"
}

// Write keeps p in the attempt's log while it fits under MaxLogBytes (the
// truncation line included); the first record that does not fit is cut
// at a character boundary and nothing after it is kept.
func (r *run) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		return len(p), nil
	}
	limit := r.w.cfg.MaxLogBytes
	if len(r.log)+len(p) <= limit {
		r.log = append(r.log, p...)
		return len(p), nil
	}
	room := max(limit-len(truncatedLine(limit))-len(r.log), 0)
	q := p[:min(room, len(p))]
	for len(q) > 0 && !utf8.Valid(q) {
		q = q[:len(q)-1]
	}
	r.log = append(r.log, q...)
	r.cut = true
	return len(p), nil
}

// Logger returns the logger of the job whose handler ctx belongs to: its
// records (Info and above) are kept with the attempt, as text lines, and
// go to the worker's logger too, with the queue, job and attempt. ok is
// false outside a Worker's handler.
func Logger(ctx context.Context) (_ *slog.Logger, ok bool) {
	r := runOf(ctx)
	if r == nil {
		return nil, false
	}
	h := &logHandler{keep: slog.NewTextHandler(r, nil)}
	if r.w.cfg.Logger != nil {
		h.next = r.w.cfg.Logger.Handler().WithAttrs([]slog.Attr{slog.String("queue", r.w.cfg.Queue),
			slog.Int64("job", r.job.ID), slog.Int("attempt", r.job.Attempt)})
	}
	return slog.New(h), true
}

// logHandler sends records to the attempt's log (keep) and to the
// worker's logger (next, nil: none).
type logHandler struct {
	keep, next slog.Handler
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.keep.Enabled(ctx, l) || (h.next != nil && h.next.Enabled(ctx, l))
}

func (h *logHandler) Handle(ctx context.Context, rec slog.Record) error {
	if h.keep.Enabled(ctx, rec.Level) {
		_ = h.keep.Handle(ctx, rec)
	}
	if h.next != nil && h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := &logHandler{keep: h.keep.WithAttrs(as)}
	if h.next != nil {
		out.next = h.next.WithAttrs(as)
	}
	return out
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	out := &logHandler{keep: h.keep.WithGroup(name)}
	if h.next != nil {
		out.next = h.next.WithGroup(name)
	}
	return out
}

// StepDone returns the stored output of step name of the job whose
// handler ctx belongs to, and whether the step completed in an earlier
// run; the first call reads the job's steps (one statement). inJob is
// false outside a Worker's handler.
func StepDone(ctx context.Context, name string) (output json.RawMessage, done, inJob bool, err error) {
	r := runOf(ctx)
	if r == nil {
		return nil, false, false, nil
	}
	r.mu.Lock()
	loaded := r.steps != nil
	r.mu.Unlock()
	if !loaded {
		steps, err := r.w.q.Steps(ctx, r.job)
		if err != nil {
			return nil, false, true, err
		}
		m := make(map[string]json.RawMessage, len(steps))
		for _, s := range steps {
			m[s.Name] = s.Output
		}
		r.mu.Lock()
		if r.steps == nil {
			r.steps = m
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	output, done = r.steps[name]
	return output, done, true, nil
}

// StepSave records step name of the job whose handler ctx belongs to as
// completed with output (JSON), at once, under the job's lease.
func StepSave(ctx context.Context, name string, output json.RawMessage) error {
	r := runOf(ctx)
	if r == nil {
		return nil
	}
	if err := r.w.q.SaveStep(ctx, r.job, name, output); err != nil {
		return err
	}
	r.mu.Lock()
	if r.steps == nil {
		r.steps = map[string]json.RawMessage{}
	}
	r.steps[name] = output
	r.mu.Unlock()
	return nil
}
