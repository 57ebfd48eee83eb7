package pgmsg

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/pgmsg/pgmsg/internal/queue"
	"github.com/pgmsg/pgmsg/internal/worker"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// JobLog is what a job's handler logged during one attempt (JobLogs).
type JobLog = pgmsgtype.JobLog

// JobStep is a step checkpoint a job's handler recorded (Step, JobSteps).
type JobStep = pgmsgtype.JobStep

const (
	// WorkerLogBytesDefault is WorkerOpts.MaxLogBytes's default: what one
	// attempt's log keeps, in bytes.
	WorkerLogBytesDefault = 64 << 10
	// WorkerLogBytesMax is the largest WorkerOpts.MaxLogBytes, the bound
	// the SQL API holds every client to (job_complete_many, job_fail and
	// job_snooze cut a longer log there).
	WorkerLogBytesMax = queue.LogBytesMax
	// StepNameMaxBytes is the longest step name (Step): 1 to 200 of A-Z
	// a-z 0-9 . _ - : /.
	StepNameMaxBytes = queue.StepNameMaxBytes
	// StepOutputMaxBytes is the largest step output, as JSON (Step).
	StepOutputMaxBytes = queue.StepOutputMaxBytes
	// JobStepsMax is the most steps one job may record.
	JobStepsMax = queue.StepsMax
)

// Logger returns the logger of the job whose handler ctx is (a Worker's
// JobHandler): what the handler logs through it, Info and above, is kept
// with the attempt as text lines (JobLogs; at most WorkerOpts.MaxLogBytes
// per attempt, cut with a last line that says so) and also goes to the
// Client's Config.Logger with the queue, job and attempt. The log is
// written by the statement that records the attempt's outcome
// (completion, retry, dead or snooze), in its transaction: logging costs
// no round trip. An attempt lost to a rescue or cancel keeps no log.
// Outside a Worker's handler Logger returns slog.Default().
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := worker.Logger(ctx); ok {
		return l
	}
	return slog.Default()
}

// Logf logs a line at Info through Logger(ctx).
func Logf(ctx context.Context, format string, args ...any) {
	Logger(ctx).InfoContext(ctx, fmt.Sprintf(format, args...))
}

// Step runs fn once per job, across attempts: in a Worker's JobHandler,
// when step name completed in an earlier attempt (or earlier in this one)
// it returns the stored output without running fn; otherwise it runs fn
// and, when fn succeeds, records its output (as JSON) at once, in its own
// short statement under the job's lease, so that an attempt that fails
// later resumes after it. A worker that lost the job's lease cannot
// record a step (ErrJobNotHeld, which the handler should return: the
// worker then leaves the job to its new holder).
//
// A step is at least once: fn's side effects before its checkpoint is
// committed (a crash, a lost lease, a failed save) happen again on the
// next attempt. Make them idempotent, or key them on the job and step.
//
// name is 1 to StepNameMaxBytes of A-Z a-z 0-9 . _ - : / (ErrInvalidStepName,
// fn not run); the output is at most StepOutputMaxBytes as JSON and a job
// records at most JobStepsMax steps (ErrStepTooLarge, after fn ran). An
// error of fn is returned as it is, and nothing is recorded. Outside a
// Worker's handler Step checks name and runs fn, recording nothing.
// Steps are kept as long as their job, and a dead job requeued
// (DeadRequeue) keeps its completed steps.
func Step[T any](ctx context.Context, name string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := checkStepName(name); err != nil {
		return zero, err
	}
	stored, done, inJob, err := worker.StepDone(ctx, name)
	if err != nil {
		return zero, err
	}
	if done {
		var out T
		if len(stored) > 0 {
			if err := json.Unmarshal(stored, &out); err != nil {
				return zero, fmt.Errorf("pgmsg: step %s: decode stored output: %w", name, err)
			}
		}
		return out, nil
	}
	out, err := fn(ctx)
	if err != nil || !inJob {
		return out, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return out, fmt.Errorf("pgmsg: step %s: encode output: %w", name, err)
	}
	if len(b) > StepOutputMaxBytes {
		return out, newError(ErrStepTooLarge, "output of step %s is %d bytes as JSON, more than %d", name, len(b), StepOutputMaxBytes)
	}
	if err := worker.StepSave(ctx, name, b); err != nil {
		return out, err
	}
	return out, nil
}

// checkStepName refuses a step name job_step_save() would refuse
// (ErrInvalidStepName), before fn runs.
func checkStepName(name string) error {
	ok := len(name) >= 1 && len(name) <= StepNameMaxBytes
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '-' || c == ':' || c == '/'
	}
	if !ok {
		return newError(ErrInvalidStepName, "invalid step name %q: 1 to %d of A-Z a-z 0-9 . _ - : /", name, StepNameMaxBytes)
	}
	return nil
}

// JobLogs returns what job id's handlers logged (Logger), one entry per
// attempt that logged something, oldest first, live or archived jobs
// alike; ErrUnknownJob if no job has the id.
func (c *Client) JobLogs(ctx context.Context, id int64) ([]JobLog, error) {
	return c.queues.Logs(ctx, id)
}

// JobSteps returns the steps job id recorded (Step), in the order they
// completed; ErrUnknownJob if no job has the id.
func (c *Client) JobSteps(ctx context.Context, id int64) ([]JobStep, error) {
	return c.queues.Steps(ctx, id)
}
