package dashboard

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// TestBrowserWorkflow opens a workflow's graph, a sequence's progress and
// a queue's per-key limits in Chromium and checks what is drawn against
// the library's answers.
func TestBrowserWorkflow(t *testing.T) {
	tb := setup(t, nil)
	_, err := tb.client.CreateQueue(tb.ctx, "flow", pgmsg.QueueConfig{})
	require.NoError(t, err)
	// a -> b, c -> d -> 15 jobs (a level drawn as a count per state).
	w := pgmsg.NewWorkflow().
		Add("a", pgmsg.EnqueueParams{Kind: "extract"}).
		Add("b", pgmsg.EnqueueParams{Kind: "transform", Priority: 5}, "a").
		Add("c", pgmsg.EnqueueParams{Kind: "transform"}, "a").
		Add("d", pgmsg.EnqueueParams{Kind: "load"}, "b", "c")
	for i := range 15 {
		w.Add("fan"+strconv.Itoa(i), pgmsg.EnqueueParams{Kind: "notify"}, "d")
	}
	res, err := tb.client.EnqueueWorkflow(tb.ctx, "flow", w, nil)
	require.NoError(t, err)
	claim := func(queue string, want int64) *pgmsg.Job {
		t.Helper()
		jobs, err := tb.client.ClaimJobs(tb.ctx, queue, &pgmsg.ClaimJobsOpts{Max: 1})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, want, jobs[0].ID)
		return jobs[0]
	}
	require.NoError(t, tb.client.Complete(tb.ctx, claim("flow", res["a"].ID)))
	claim("flow", res["b"].ID)

	b := newBrowser(t)
	base := tb.ts.URL
	b.run(t, b.login(base, tb.admin)...)

	t.Run("workflow graph", func(t *testing.T) {
		b.open(t, base, fmt.Sprintf("#/jobs/%d", res["d"].ID))
		wf, err := tb.client.GetWorkflow(tb.ctx, res["d"].ID, nil)
		require.NoError(t, err)
		require.Len(t, wf, 19)
		drawn := 0
		for _, j := range wf {
			if j.Level == 3 {
				continue // collapsed
			}
			drawn++
			sel := fmt.Sprintf(`#workflow-graph g.wf-node[data-job="%d"]`, j.ID)
			require.Equal(t, 1, b.count(t, sel), "job %d drawn", j.ID)
			require.Equal(t, string(j.State), eval[string](t, b, `document.querySelector('`+sel+`').dataset.state`), "job %d", j.ID)
			require.Equal(t, strconv.Itoa(j.Level), eval[string](t, b, `document.querySelector('`+sel+`').dataset.level`), "job %d", j.ID)
		}
		require.Equal(t, 4, drawn)
		require.Equal(t, drawn, b.count(t, `#workflow-graph g.wf-node[data-job]`))
		require.Equal(t, "completed", eval[string](t, b, fmt.Sprintf(`document.querySelector('[data-job="%d"]').dataset.state`, res["a"].ID)))
		require.Equal(t, "running", eval[string](t, b, fmt.Sprintf(`document.querySelector('[data-job="%d"]').dataset.state`, res["b"].ID)))
		require.Equal(t, "available", eval[string](t, b, fmt.Sprintf(`document.querySelector('[data-job="%d"]').dataset.state`, res["c"].ID)))
		require.Equal(t, "pending", eval[string](t, b, fmt.Sprintf(`document.querySelector('[data-job="%d"]').dataset.state`, res["d"].ID)))
		// The 15 jobs of level 3 are one node, "pending ×15".
		require.Equal(t, 1, b.count(t, `#workflow-graph g.wf-node[data-collapsed="15"][data-state="pending"][data-level="3"]`))
		require.Contains(t, b.text(t, "#workflow-notes"), "Level 3: 15 jobs")
		// Edges: a->b, a->c, b->d, c->d, d->(level 3).
		require.Equal(t, 5, b.count(t, `#workflow-graph path.wf-edge`))
		require.Equal(t, 1, b.count(t, fmt.Sprintf(`#workflow-graph path.wf-edge[data-from="J%d"][data-to="L3:pending"]`, res["d"].ID)))
		// Each node has its state's colour.
		fill := func(id int64) string {
			return eval[string](t, b, fmt.Sprintf(`getComputedStyle(document.querySelector('[data-job="%d"] rect')).fill`, id))
		}
		require.NotEqual(t, fill(res["a"].ID), fill(res["b"].ID), "completed and running differ")
		require.NotEqual(t, fill(res["b"].ID), fill(res["c"].ID), "running and available differ")
		b.noConsoleErrors(t, "workflow")
		b.screenshotOf(t, "workflow", `section[aria-labelledby="h-wf"]`)
		// A click on a node opens its job.
		b.run(t, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#workflow-graph g.wf-node[data-job="%d"]`, res["b"].ID))),
			waitVisible(fmt.Sprintf(`body[data-ready="#/jobs/%d"]`, res["b"].ID)))
		require.Equal(t, "running", b.text(t, `[data-stat="state"]`))
		require.Contains(t, eval[string](t, b, `document.getElementById("workflow-graph").textContent`), "transform")
		b.noConsoleErrors(t, "workflow after click")
		// The root job (no dependencies of its own) shows the same graph.
		b.open(t, base, fmt.Sprintf("#/jobs/%d", res["a"].ID))
		require.Equal(t, 4, b.count(t, `#workflow-graph g.wf-node[data-job]`))
		require.Equal(t, 1, b.count(t, fmt.Sprintf(`#workflow-graph g.wf-node.current[data-job="%d"]`, res["a"].ID)))
		// A job outside any workflow has no graph.
		plain, err := tb.client.Enqueue(tb.ctx, "flow", pgmsg.EnqueueParams{}, nil)
		require.NoError(t, err)
		b.open(t, base, fmt.Sprintf("#/jobs/%d", plain.ID))
		require.Zero(t, b.count(t, `#workflow-graph`))
		require.NotContains(t, b.text(t, "#main"), "null", "no section drawn as null")
		// A small workflow's graph has no notes, and no null in their place.
		small, err := tb.client.EnqueueWorkflow(tb.ctx, "flow", pgmsg.NewWorkflow().
			Add("x", pgmsg.EnqueueParams{Kind: "x"}).Add("y", pgmsg.EnqueueParams{Kind: "y"}, "x"), nil)
		require.NoError(t, err)
		b.open(t, base, fmt.Sprintf("#/jobs/%d", small["y"].ID))
		require.Equal(t, 2, b.count(t, `#workflow-graph g.wf-node[data-job]`))
		require.Zero(t, b.count(t, `#workflow-notes`))
		require.NotContains(t, b.text(t, "#workflow-box"), "null")
		b.noConsoleErrors(t, "small workflow")
	})

	t.Run("sequence", func(t *testing.T) {
		_, err := tb.client.CreateQueue(tb.ctx, "ledger", pgmsg.QueueConfig{})
		require.NoError(t, err)
		var ids []int64
		for range 4 {
			r, err := tb.client.Enqueue(tb.ctx, "ledger", pgmsg.EnqueueParams{SequenceKey: "acct-9"}, nil)
			require.NoError(t, err)
			ids = append(ids, r.ID)
		}
		require.NoError(t, tb.client.Complete(tb.ctx, claim("ledger", ids[0])))
		claim("ledger", ids[1])
		b.open(t, base, fmt.Sprintf("#/jobs/%d", ids[2]))
		rows := eval[[]string](t, b, `[...document.querySelectorAll("#sequence tbody tr")].map((r) => r.dataset.seq + ":" + r.querySelector('td[data-col=""]:nth-child(2)').textContent)`)
		require.Equal(t, []string{
			fmt.Sprintf("last:%d", ids[0]), fmt.Sprintf("head:%d", ids[1]),
			fmt.Sprintf("pending:%d (this job)", ids[2]), fmt.Sprintf("pending:%d", ids[3]),
		}, rows)
		require.Contains(t, b.text(t, "#sequence-box"), "2 waiting")
		b.noConsoleErrors(t, "sequence")
	})

	t.Run("queue limits", func(t *testing.T) {
		_, err := tb.client.CreateQueue(tb.ctx, "tenants", pgmsg.QueueConfig{KeyLimit: 2, KeyField: "tenant"})
		require.NoError(t, err)
		for _, k := range []string{"k1", "k1", "k1", "k2"} {
			_, err := tb.client.Enqueue(tb.ctx, "tenants", pgmsg.EnqueueParams{Payload: []byte(`{"tenant":"` + k + `"}`)}, nil)
			require.NoError(t, err)
		}
		_, err = tb.client.ClaimJobs(tb.ctx, "tenants", &pgmsg.ClaimJobsOpts{Max: 10})
		require.NoError(t, err)
		keys, err := tb.client.ListLimitKeys(tb.ctx, "tenants", nil)
		require.NoError(t, err)
		require.Len(t, keys, 2)
		b.open(t, base, "#/queues/tenants")
		require.Equal(t, "2", b.text(t, `#queue-limits dd[data-stat="key_limit"]`))
		require.Equal(t, "tenant", b.text(t, `#queue-limits dd[data-stat="key_field"]`))
		for _, k := range keys {
			require.Equal(t, num(k.Running), b.text(t, `#limit-keys tr[data-key="`+k.Key+`"] td[data-col="running"]`), k.Key)
		}
		order := eval[[]string](t, b, `[...document.querySelectorAll("#limit-keys tbody tr")].map((r) => r.dataset.key)`)
		require.Equal(t, []string{"k1", "k2"}, order, "most running first")
		b.noConsoleErrors(t, "queue limits")
		b.screenshotOf(t, "queue-limits", `section[aria-labelledby="h-limits"]`)
	})
}

// screenshotOf captures one element of the page (as screenshot does the
// viewport, written only under PGMSG_SCREENSHOTS): the sections this test
// draws are below the fold of their pages.
func (b *browser) screenshotOf(t *testing.T, name, sel string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	require.NoError(t, err)
	require.NotEmpty(t, png)
	if os.Getenv("PGMSG_SCREENSHOTS") == "" {
		return
	}
	require.NoError(t, os.MkdirAll(screenshotDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644))
}
