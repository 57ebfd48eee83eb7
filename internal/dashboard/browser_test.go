package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// screenshotDir is where the browser test writes a PNG of each page (the
// README shows one) when PGMSG_SCREENSHOTS is set (`make screenshots`):
// an ordinary test run leaves the source tree as it found it.
const screenshotDir = "../../docs/dashboard"

// browser is a headless Chromium tab and the console errors it reported.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// newBrowser starts Debian's chromium with a fresh profile. Without it
// the test is skipped, loudly, unless PGMSG_REQUIRE_BROWSER is set (as
// .ci/run sets it, after installing chromium), when it fails.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := os.Getenv("PGMSG_CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		if os.Getenv("PGMSG_REQUIRE_BROWSER") != "" {
			t.Fatal("PGMSG_REQUIRE_BROWSER is set but no chromium was found: apt-get install chromium")
		}
		t.Skip("SKIPPED: no chromium on PATH, so the dashboard was NOT tested in a browser (apt-get install chromium; .ci/run does)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelTime)
	b := &browser{ctx: ctx}
	// Console errors, uncaught exceptions and browser log errors (a failed
	// request included) of every page, collected until the tab closes.
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, m.String())
				b.mu.Unlock()
			}
		}
	}()
	b.run(t, chromedp.EmulateViewport(1280, 800))
	return b
}

func (b *browser) run(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.mu.Lock()
		defer b.mu.Unlock()
		page, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.outerHTML.slice(0, 3000)`))
		t.Fatalf("browser: %v\nconsole errors: %q\npage: %s", err, b.errors, page)
	}
}

// eval returns the value of a JavaScript expression (awaited if a promise).
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	require.NoError(t, err, expr)
	return v
}

// noConsoleErrors fails the test if the pages logged an error so far.
func (b *browser) noConsoleErrors(t *testing.T, page string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(t, b.errors, "console errors on %s", page)
}

// open shows a page (a hash route) and waits until its first figures are
// drawn (app.js sets body[data-ready] then).
func (b *browser) open(t *testing.T, base, hash string) {
	t.Helper()
	b.run(t, chromedp.Navigate(base+Prefix+hash), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="`+hash+`"]`)))
}

// login fills in and sends the login form, and waits for the overview.
func (b *browser) login(base, secret string) []chromedp.Action[chromedp.Void] {
	return []chromedp.Action[chromedp.Void]{
		chromedp.Navigate(base + Prefix + "login"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), secret), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="#/"]`)),
	}
}

func waitVisible(css string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(css))
}

func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	// One evaluation finds the element and reads it: chromedp.Text finds
	// the node, then reads it in a second call, and a page that redraws
	// in between (the overview's refresh) fails it with "No node with
	// given id found" (seen under load).
	js, _ := json.Marshal(sel)
	var s string
	var err error
	for {
		var got *string
		got, err = chromedp.Run(ctx, chromedp.Evaluate[*string](`(() => { const e = document.querySelector(`+string(js)+`); return e ? e.innerText : null })()`))
		if err == nil && got != nil {
			s = *got
			break
		}
		if err == nil {
			err = fmt.Errorf("no element %s", sel)
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		// Say what the page shows instead (an error panel, a toast), so
		// that a failure here is diagnosable from the log.
		page, perr := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ""`))
		require.NoError(t, err, "%s; the page shows: %q (%v)", sel, page, perr)
	}
	return strings.TrimSpace(s)
}

func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	b.run(t, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0); document.getElementById("toast") && (document.getElementById("toast").textContent = "")`))
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NotEmpty(t, png)
	if os.Getenv("PGMSG_SCREENSHOTS") == "" {
		return
	}
	require.NoError(t, os.MkdirAll(screenshotDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644))
}

// confirm answers the open confirmation dialog by keyboard (its Confirm
// button has the focus) and waits for the toast that reports the outcome.
func (b *browser) confirm(t *testing.T, toastPrefix string) {
	t.Helper()
	b.run(t, chromedp.WaitVisible(chromedp.CSS(`#confirm[open]`)),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("toast").textContent = ""`), chromedp.KeyEvent("\r"))
	b.waitToast(t, toastPrefix)
}

// waitToast waits for the toast that reports an action's outcome.
func (b *browser) waitToast(t *testing.T, toastPrefix string) {
	t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.getElementById("toast").textContent !== ""`, chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err, "no outcome of the action was shown")
	got := b.text(t, "#toast")
	require.True(t, strings.HasPrefix(got, toastPrefix), "toast %q, want %q…", got, toastPrefix)
}

func num(n int64) string { return formatThousands(n) }

// formatThousands formats n as the pages do (en-US: 12,345).
func formatThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []string
	for len(s) > 3 {
		out = append([]string{s[len(s)-3:]}, out...)
		s = s[:len(s)-3]
	}
	out = append([]string{s}, out...)
	if neg {
		return "-" + strings.Join(out, ",")
	}
	return strings.Join(out, ",")
}

// seed gives the pages something to show: a topic with records, a group
// with a member and lag, a queue with dead, available and scheduled jobs.
func seed(t *testing.T, tb *testBundle) (deadIDs []int64) {
	t.Helper()
	_, err := tb.client.CreateTopic(tb.ctx, "orders", pgmsg.TopicConfig{Partitions: 3,
		Settings: map[string]any{"retention": "168h", "max_partition_records": 1000000}})
	require.NoError(t, err)
	_, err = tb.client.CreateTopic(tb.ctx, "audit", pgmsg.TopicConfig{Partitions: 1})
	require.NoError(t, err)
	var recs []*pgmsg.Record
	for i := range 120 {
		recs = append(recs, &pgmsg.Record{Topic: "orders", Key: []byte(fmt.Sprintf("customer-%d", i%7)),
			Value:   []byte(fmt.Sprintf(`{"order":%d,"amount":%d.50,"currency":"EUR"}`, i, 10+i%50)),
			Headers: map[string][]byte{"source": []byte("checkout")}})
	}
	recs = append(recs, &pgmsg.Record{Topic: "audit", Value: []byte("user alice logged in")})
	require.NoError(t, tb.client.Publish(tb.ctx, recs, nil))
	_, err = tb.client.Heartbeat(tb.ctx, "orders", "billing", "billing-worker-1", time.Minute)
	require.NoError(t, err)
	for range 2 {
		cl, err := tb.client.Claim(tb.ctx, "orders", "billing", &pgmsg.ClaimOpts{MaxRecords: 20})
		require.NoError(t, err)
		if cl != nil {
			require.NoError(t, tb.client.Commit(tb.ctx, cl))
		}
	}
	created, err := tb.client.CreateGroup(tb.ctx, "orders", "scratch", "earliest")
	require.NoError(t, err)
	require.True(t, created)
	deadIDs = tb.deadJobs(t, "emails", 3)
	var params []pgmsg.EnqueueParams
	for i := range 12 {
		params = append(params, pgmsg.EnqueueParams{Kind: "send_email", Payload: []byte(fmt.Sprintf(`{"to":"u%d@example.com"}`, i))})
	}
	params = append(params, pgmsg.EnqueueParams{Kind: "digest", Payload: []byte(`{}`), RunAt: time.Now().Add(time.Hour)})
	_, err = tb.client.EnqueueMany(tb.ctx, "emails", params, nil)
	require.NoError(t, err)
	_, err = tb.client.CreateQueue(tb.ctx, "reports", pgmsg.QueueConfig{})
	require.NoError(t, err)
	// A queue of more jobs than a page holds, some finished (archived),
	// for the job list's order and paging.
	params = params[:0]
	for i := range backlogJobs {
		params = append(params, pgmsg.EnqueueParams{Kind: "resize", Payload: []byte(fmt.Sprintf(`{"image":%d}`, i))})
	}
	_, err = tb.client.EnqueueMany(tb.ctx, "backlog", params, nil)
	require.NoError(t, err)
	jobs, err := tb.client.ClaimJobs(tb.ctx, "backlog", &pgmsg.ClaimJobsOpts{Max: 10, Worker: "seed"})
	require.NoError(t, err)
	require.NotEmpty(t, jobs)
	for _, j := range jobs {
		require.NoError(t, tb.client.Complete(tb.ctx, j))
	}
	return deadIDs
}

// backlogJobs is how many jobs seed enqueues in queue "backlog": two full
// pages of the job list (app.js's PAGE_SIZE, 50) and part of a third.
const backlogJobs = 120

// TestBrowser drives every page in headless Chromium: each loads with no
// console error and shows the API's figures; an admin requeues dead jobs
// (by keyboard), pauses and resumes a queue, resets and deletes a group, cancels a
// job, creates and revokes a token, and each takes effect in the
// database; a read-only session sees no action and is
// refused one it forges. It writes a screenshot of each page.
func TestBrowser(t *testing.T) {
	tb := setup(t, nil)
	deadIDs := seed(t, tb)
	b := newBrowser(t)
	base := tb.ts.URL

	// Not logged in: the shell sends the browser to the login form.
	b.run(t, chromedp.Navigate(base+Prefix), chromedp.WaitVisible(chromedp.ID("token")))
	b.screenshot(t, "login")
	b.run(t, b.login(base, tb.admin)...)
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{})
	require.NoError(t, err)
	cookies := res.Cookies
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HTTPOnly)
	require.Equal(t, network.CookieSameSiteStrict, cookies[0].SameSite)
	jsCookie := eval[string](t, b, `document.cookie`)
	require.Empty(t, jsCookie, "the page's scripts cannot read the token")

	t.Run("overview", func(t *testing.T) {
		b.open(t, base, "#/")
		stats, err := tb.client.AllQueueStats(tb.ctx)
		require.NoError(t, err)
		var dead, depth int64
		for _, s := range stats {
			dead += s.Dead
			depth += s.Available + s.Scheduled + s.Retrying
			require.Equal(t, num(s.Available), b.text(t, `#queues tr[data-queue="`+s.Queue+`"] td[data-col="available"]`))
			require.Equal(t, num(s.Dead), b.text(t, `#queues tr[data-queue="`+s.Queue+`"] td[data-col="dead"]`))
		}
		require.Equal(t, num(dead), b.text(t, `dd[data-stat="dead"]`))
		require.Equal(t, num(depth), b.text(t, `dd[data-stat="depth"]`))
		groups, err := tb.client.ListGroups(tb.ctx, "orders", "")
		require.NoError(t, err)
		var lag int64
		for _, g := range groups {
			lag += g.Lag
		}
		require.Positive(t, lag)
		require.Equal(t, num(lag), b.text(t, `#topics tr[data-topic="orders"] td[data-col="lag"]`))
		require.Equal(t, "2", b.text(t, `dd[data-stat="topics"]`))
		require.Equal(t, "120", b.text(t, `#topics tr[data-topic="orders"] td[data-col="records"]`))
		b.noConsoleErrors(t, "overview")
		b.screenshot(t, "overview")
	})

	t.Run("topic", func(t *testing.T) {
		b.open(t, base, "#/topics/orders")
		d, err := tb.client.DescribeTopic(tb.ctx, "orders")
		require.NoError(t, err)
		for _, p := range d.PartitionInfo {
			row := fmt.Sprintf(`#partitions tr[data-partition="%d"] `, p.Partition)
			require.Equal(t, num(p.StartOffset), b.text(t, row+`td[data-col="start"]`))
			require.Equal(t, num(p.NextOffset), b.text(t, row+`td[data-col="next"]`))
		}
		require.Contains(t, b.text(t, "#settings"), "retention")
		// Partition 0's first records show without pressing Browse.
		b.run(t, chromedp.WaitVisible(chromedp.CSS(`[data-shown="partition=0;offset=0;view=auto"] #records tr[data-offset="0"]`)))
		// Browse partition 0 from offset 2.
		b.run(t, chromedp.SetValue(chromedp.CSS(`#record-form input[name="offset"]`), "2"),
			chromedp.Click(chromedp.CSS(`#record-form button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-shown="partition=0;offset=2;view=auto"] #records tr[data-offset="2"]`)))
		recs, err := tb.client.Fetch(tb.ctx, "orders", 0, 2, 1)
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.Contains(t, strings.Join(strings.Fields(b.text(t, `#records tr[data-offset="2"] td[data-col="value"]`)), ""),
			strings.ReplaceAll(string(recs[0].Value), " ", ""))
		// The same record in hex.
		b.run(t, chromedp.SetValue(chromedp.CSS(`#record-form select[name="view"]`), "hex"),
			chromedp.Click(chromedp.CSS(`#record-form button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-shown="partition=0;offset=2;view=hex"] #records tr[data-offset="2"]`)))
		require.True(t, strings.HasPrefix(b.text(t, `#records tr[data-offset="2"] td[data-col="value"]`), fmt.Sprintf("%02x %02x", recs[0].Value[0], recs[0].Value[1])))
		require.Equal(t, 1, b.count(t, ".uplot"), "the publish-rate chart is drawn by uPlot")
		b.noConsoleErrors(t, "topic")
		b.screenshot(t, "topic")
	})

	t.Run("group reset", func(t *testing.T) {
		b.open(t, base, "#/topics/orders/groups/billing")
		g, err := tb.client.DescribeGroup(tb.ctx, "orders", "billing")
		require.NoError(t, err)
		var lag int64
		for _, p := range g.Partitions {
			lag += p.Lag
			row := fmt.Sprintf(`#group-partitions tr[data-partition="%d"] `, p.Partition)
			require.Equal(t, num(p.NextOffset), b.text(t, row+`td[data-col="cursor"]`))
			require.Equal(t, num(p.Lag), b.text(t, row+`td[data-col="lag"]`))
		}
		require.Less(t, lag, int64(120), "the group consumed some records")
		require.Equal(t, num(lag), b.text(t, `dd[data-stat="lag"]`))
		require.Contains(t, b.text(t, "#members"), "billing-worker-1")
		b.noConsoleErrors(t, "group")
		b.screenshot(t, "group")
		b.run(t, chromedp.SetValue(chromedp.CSS(`#reset-form select[name="to"]`), "earliest"),
			chromedp.Click(chromedp.CSS(`#reset-form button[type="submit"]`)))
		b.confirm(t, "Group reset to earliest")
		g, err = tb.client.DescribeGroup(tb.ctx, "orders", "billing")
		require.NoError(t, err)
		for _, p := range g.Partitions {
			require.Zero(t, p.NextOffset, "partition %d", p.Partition)
			require.Equal(t, p.EndOffset, p.Lag)
		}
		b.noConsoleErrors(t, "group after reset")
		// Delete another group; the page goes back to its topic.
		b.open(t, base, "#/topics/orders/groups/scratch")
		b.run(t, chromedp.Click(chromedp.CSS(`button[data-action="delete-group"]`)))
		b.confirm(t, "Group deleted")
		gs, err := tb.client.ListGroups(tb.ctx, "orders", "scratch")
		require.NoError(t, err)
		require.Empty(t, gs)
		b.run(t, waitVisible(`body[data-ready="#/topics/orders"]`))
		b.noConsoleErrors(t, "group after delete")
	})

	t.Run("queue requeue", func(t *testing.T) {
		b.open(t, base, "#/queues/emails")
		st, err := tb.client.QueueStats(tb.ctx, "emails")
		require.NoError(t, err)
		for k, v := range map[string]int64{"available": st.Available, "scheduled": st.Scheduled, "dead": st.Dead, "running": st.Running} {
			require.Equal(t, num(v), b.text(t, `dd[data-stat="`+k+`"]`), k)
		}
		require.EqualValues(t, len(deadIDs), st.Dead)
		// Filter the job list to dead jobs.
		b.run(t, chromedp.SetValue(chromedp.CSS(`#job-filter select[name="state"]`), "dead"),
			chromedp.Click(chromedp.CSS(`#job-filter button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#jobs-box[data-shown="state=dead;kind=;order=desc;after=0"] #jobs`)))
		require.Equal(t, len(deadIDs), b.count(t, "#jobs tbody tr[data-job]"))
		require.Equal(t, 2, b.count(t, ".uplot"), "throughput and latency charts")
		b.noConsoleErrors(t, "queue")
		b.screenshot(t, "queue")
		// Requeue by keyboard: focus the button, Enter, Enter in the dialog.
		b.run(t, chromedp.Focus(chromedp.CSS(`button[data-action="requeue-dead"]`)), chromedp.KeyEvent("\r"))
		b.confirm(t, fmt.Sprintf("Requeued %d jobs", len(deadIDs)))
		st, err = tb.client.QueueStats(tb.ctx, "emails")
		require.NoError(t, err)
		require.Zero(t, st.Dead)
		// Pause (confirmed), then resume (no confirmation needed).
		b.run(t, chromedp.Click(chromedp.CSS(`button[data-action="pause"]`)))
		b.confirm(t, "Queue paused")
		st, err = tb.client.QueueStats(tb.ctx, "emails")
		require.NoError(t, err)
		require.True(t, st.Paused)
		b.run(t, chromedp.Evaluate[chromedp.Void](`document.getElementById("toast").textContent = ""`),
			chromedp.Click(chromedp.CSS(`button[data-action="resume"]`)))
		b.waitToast(t, "Queue resumed")
		st, err = tb.client.QueueStats(tb.ctx, "emails")
		require.NoError(t, err)
		require.False(t, st.Paused)
		b.noConsoleErrors(t, "queue after requeue, pause and resume")
	})

	t.Run("queue job order", func(t *testing.T) {
		// Every job of the queue, newest first, as the API lists them.
		var want []int64
		for after := int64(0); ; {
			page, err := tb.client.ListJobs(tb.ctx, "backlog", &pgmsg.ListJobsOpts{Order: pgmsg.JobOrderDesc, AfterID: after, Limit: 1000})
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			for _, j := range page {
				want = append(want, j.ID)
			}
			after = page[len(page)-1].ID
		}
		require.Len(t, want, backlogJobs)
		for i := 1; i < len(want); i++ {
			require.Greater(t, want[i-1], want[i], "ListJobs newest first")
		}
		shown := func() []int64 {
			return eval[[]int64](t, b, `[...document.querySelectorAll("#jobs tbody tr[data-job]")].map((r) => Number(r.dataset.job))`)
		}
		waitPage := func(order string, after int64) {
			b.run(t, waitVisible(fmt.Sprintf(`#jobs-box[data-shown="state=;kind=;order=%s;after=%d"] #jobs`, order, after)))
		}
		// The page opens on the newest jobs, without pressing anything.
		b.open(t, base, "#/queues/backlog")
		waitPage("desc", 0)
		require.Equal(t, want[:50], shown(), "first page: the 50 newest jobs, newest first")
		// Next pages go back in time; the last is short and ends the list.
		b.run(t, chromedp.Click(chromedp.ID("jobs-next")))
		waitPage("desc", want[49])
		require.Equal(t, want[50:100], shown())
		b.run(t, chromedp.Click(chromedp.ID("jobs-next")))
		waitPage("desc", want[99])
		require.Equal(t, want[100:], shown())
		require.True(t, eval[bool](t, b, `document.getElementById("jobs-next").disabled`), "no page after the oldest jobs")
		// Previous comes back to the page before.
		b.run(t, chromedp.Click(chromedp.ID("jobs-prev")))
		waitPage("desc", want[49])
		require.Equal(t, want[50:100], shown())
		// Oldest first on request, from the start again.
		b.run(t, chromedp.SetValue(chromedp.CSS(`#job-filter select[name="order"]`), "asc"),
			chromedp.Click(chromedp.CSS(`#job-filter button[type="submit"]`)))
		waitPage("asc", 0)
		oldest := make([]int64, 50)
		for i := range oldest {
			oldest[i] = want[len(want)-1-i]
		}
		require.Equal(t, oldest, shown(), "oldest first")
		b.noConsoleErrors(t, "queue job order")
	})

	t.Run("job", func(t *testing.T) {
		b.open(t, base, fmt.Sprintf("#/jobs/%d", deadIDs[0]))
		j, err := tb.client.GetJob(tb.ctx, deadIDs[0])
		require.NoError(t, err)
		require.Equal(t, string(j.State), b.text(t, `[data-stat="state"]`))
		require.Contains(t, b.text(t, "#attempts"), errSMTP.Error())
		require.Contains(t, b.text(t, "#logs"), "Nothing logged.")
		// Requeued above, the job is available: it can be cancelled, not
		// retried (409 job_not_waiting) or requeued.
		require.Equal(t, string(pgmsg.JobStateAvailable), string(j.State))
		require.Equal(t, 0, b.count(t, `button[data-action="retry"]`))
		require.Equal(t, 0, b.count(t, `button[data-action="requeue"]`))
		require.Zero(t, j.BatchID)
		require.Equal(t, "—", b.text(t, `#job tr[data-field="Batch"] td:nth-child(2)`), "a job of no batch")
		require.NotContains(t, b.text(t, "#main"), "null", "the sections a job of no workflow or sequence lacks are not drawn as null")
		b.noConsoleErrors(t, "job")
		b.screenshot(t, "job")
		b.run(t, chromedp.Click(chromedp.CSS(`button[data-action="cancel"]`)))
		b.confirm(t, "Job cancelled")
		j, err = tb.client.GetJob(tb.ctx, deadIDs[0])
		require.NoError(t, err)
		require.Equal(t, pgmsg.JobStateCancelled, j.State)
		b.noConsoleErrors(t, "job after cancel")
		// A dead job's action is requeue, not retry.
		dead := tb.deadJobs(t, "retired", 1)[0]
		b.open(t, base, fmt.Sprintf("#/jobs/%d", dead))
		require.Equal(t, 0, b.count(t, `button[data-action="retry"]`))
		b.run(t, chromedp.Click(chromedp.CSS(`button[data-action="requeue"]`)))
		b.confirm(t, "Job requeued")
		j, err = tb.client.GetJob(tb.ctx, dead)
		require.NoError(t, err)
		require.Equal(t, pgmsg.JobStateAvailable, j.State)
		b.noConsoleErrors(t, "dead job after requeue")
		// A job of a batch shows the batch's id (GET /v1/jobs/{id}
		// batch_id), a link to the batch's page.
		batch, err := tb.client.EnqueueBatch(tb.ctx, "reports", []pgmsg.EnqueueParams{{Kind: "render"}, {Kind: "render"}}, nil)
		require.NoError(t, err)
		member := batch.Jobs[1].ID
		j, err = tb.client.GetJob(tb.ctx, member)
		require.NoError(t, err)
		require.Equal(t, batch.ID, j.BatchID)
		b.open(t, base, fmt.Sprintf("#/jobs/%d", member))
		link := `#job tr[data-field="Batch"] a`
		require.Equal(t, strconv.FormatInt(batch.ID, 10), b.text(t, link))
		require.Equal(t, fmt.Sprintf("#/batches/%d", batch.ID), eval[string](t, b, `document.querySelector('`+link+`').getAttribute("href")`))
		b.run(t, chromedp.Click(chromedp.CSS(link)), waitVisible(fmt.Sprintf(`body[data-ready="#/batches/%d"]`, batch.ID)))
		require.Equal(t, fmt.Sprintf("Batch %d", batch.ID), b.text(t, "#main h1"))
		require.Equal(t, "0 of 2 jobs final", b.text(t, "#main > p"))
		b.noConsoleErrors(t, "batch job")
	})

	t.Run("tokens", func(t *testing.T) {
		b.open(t, base, "#/tokens")
		require.Contains(t, b.text(t, "#tokens"), "viewer")
		b.run(t, chromedp.SendKeys(chromedp.CSS(`#token-form input[name="name"]`), "ci-bot"),
			chromedp.SendKeys(chromedp.CSS(`#token-form input[name="scopes"]`), "read, publish:orders"),
			chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.ID("new-secret")))
		secret := b.text(t, "#new-secret")
		tok, err := tb.client.VerifyToken(tb.ctx, secret)
		require.NoError(t, err, "the secret shown once is the new token's")
		require.Equal(t, []string{"read", "publish:orders"}, tok.Scopes)
		b.noConsoleErrors(t, "tokens")
		b.screenshot(t, "tokens")
		b.run(t, waitVisible(`#tokens tr[data-token="ci-bot"] button[data-action="revoke"]`),
			chromedp.Click(chromedp.CSS(`#tokens tr[data-token="ci-bot"] button[data-action="revoke"]`)))
		b.confirm(t, "Token revoked")
		_, err = tb.client.VerifyToken(tb.ctx, secret)
		require.ErrorIs(t, err, pgmsg.ErrInvalidToken)
		b.noConsoleErrors(t, "tokens after revoke")
	})

	t.Run("phone width", func(t *testing.T) {
		b.run(t, chromedp.EmulateViewport(390, 844))
		b.open(t, base, "#/queues/emails")
		overflow := eval[bool](t, b, `document.documentElement.scrollWidth > window.innerWidth`)
		require.False(t, overflow, "the page does not scroll sideways at 390 px (wide tables scroll in their box)")
		b.screenshot(t, "queue-phone")
		b.run(t, chromedp.EmulateViewport(1280, 800))
	})

	t.Run("read-only", func(t *testing.T) {
		_, err := chromedp.Call(b.ctx, network.ClearBrowserCookies, cdp.Empty{})
		require.NoError(t, err)
		b.run(t, b.login(base, tb.reader)...)
		tb.deadJobs(t, "exports", 1)
		for _, hash := range []string{"#/", "#/queues/exports", "#/topics/orders/groups/billing", fmt.Sprintf("#/jobs/%d", deadIDs[0])} {
			b.open(t, base, hash)
			require.Zero(t, b.count(t, "[data-action], #reset-form, #token-form"), "%s shows no action to a read-only token", hash)
		}
		require.Equal(t, 0, b.count(t, "#nav-tokens:not([hidden])"))
		b.noConsoleErrors(t, "read-only pages")
		// Forge the action from the page, with the session's CSRF token.
		status := eval[int](t, b, `(async () => {
			const s = await (await fetch("/ui/api/session")).json();
			const r = await fetch("/ui/api/v1/queues/exports/dead/requeue", {method: "POST", headers: {"X-CSRF-Token": s.csrf}});
			return r.status;
		})()`)
		require.Equal(t, 403, status)
		st, err := tb.client.QueueStats(tb.ctx, "exports")
		require.NoError(t, err)
		require.EqualValues(t, 1, st.Dead)
	})

	t.Run("logout", func(t *testing.T) {
		b.open(t, base, "#/")
		res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{})
		require.NoError(t, err)
		require.Len(t, res.Cookies, 1)
		id := res.Cookies[0].Value
		require.NotEqual(t, tb.reader, id, "the cookie holds the token")
		b.run(t, chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("token")))
		// The session has ended: a copy of its cookie is refused.
		ans := tb.do(t, request{method: http.MethodGet, path: Prefix + "api/session", cookie: id})
		require.Equal(t, http.StatusUnauthorized, ans.status)
		b.run(t, chromedp.Navigate(base+Prefix), chromedp.WaitVisible(chromedp.ID("token")))
	})
}

func (b *browser) count(t *testing.T, sel string) int {
	t.Helper()
	nodes, err := chromedp.Run(b.ctx, chromedp.Nodes(chromedp.CSSAll(sel), chromedp.AtLeast(0)))
	require.NoError(t, err, sel)
	return len(nodes)
}
