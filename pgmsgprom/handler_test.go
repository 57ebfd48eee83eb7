package pgmsgprom_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/pgmsgprom"
)

// scrape GETs /metrics from h, with Accept-Encoding: gzip if gz, and
// returns the body (gunzipped, checking that it is one gzip member).
func scrape(t *testing.T, h http.Handler, gz bool) string {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	require.Equal(t, 200, w.Code, w.Body.String())
	if !gz {
		require.Empty(t, w.Header().Get("Content-Encoding"))
		return w.Body.String()
	}
	require.Equal(t, "gzip", w.Header().Get("Content-Encoding"))
	zr, err := gzip.NewReader(bytes.NewReader(w.Body.Bytes()))
	require.NoError(t, err)
	zr.Multistream(false) // one member: readers that stop after the first get it all
	body, err := io.ReadAll(zr)
	require.NoError(t, err, "CRC and length are checked at the member's end")
	return string(body)
}

// parseText parses a text exposition into its families by name, each
// family's series sorted, and checks that no family is split.
func parseText(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err, "a family split in two or a malformed line fails here")
	for _, mf := range mfs {
		sort.Slice(mf.Metric, func(i, j int) bool { return labels(mf.Metric[i]) < labels(mf.Metric[j]) })
		for _, m := range mf.Metric {
			m.TimestampMs = nil
		}
	}
	return mfs
}

func labels(m *dto.Metric) string {
	var b strings.Builder
	for _, l := range m.Label {
		b.WriteString(l.GetName() + "=" + l.GetValue() + ",")
	}
	return b.String()
}

// The handler writes what promhttp writes for the same figures: every
// family and series with the same values (the ages of lagging groups
// excepted, which grow between the two scrapes), HELP and TYPE included,
// plain and gzipped, groups that lag (ages written on each scrape) and
// groups that do not (kept) in one age family; and a scrape after a
// publish shows the new figures.
func TestHandlerMatchesPromhttp(t *testing.T) {
	ctx, client := testClient(t, "billing", "orders", "pay.ments", "z_last")
	publish := func(n int) {
		recs := make([]*pgmsg.Record, n)
		for i := range recs {
			recs[i] = &pgmsg.Record{Topic: "orders", Value: []byte("v")}
		}
		require.NoError(t, client.Publish(ctx, recs, nil))
		// The segments a publish has ahead are made after it commits:
		// made now, so that both scrapes count the same.
		_, err := client.MaintainOnce(ctx, nil)
		require.NoError(t, err)
	}
	publish(3)

	reference := func() map[string]*dto.MetricFamily {
		col := pgmsgprom.NewCollector(client, nil)
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(col))
		return parseText(t, scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), false))
	}
	col := pgmsgprom.NewCollector(client, nil)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	h := col.Handler(reg)

	check := func(wantLag float64) {
		want := reference()
		for _, gz := range []bool{false, true} {
			got := parseText(t, scrape(t, h, gz))
			require.Equal(t, len(want), len(got), "families")
			for name, wf := range want {
				gf := got[name]
				require.NotNil(t, gf, name)
				require.Equal(t, wf.GetHelp(), gf.GetHelp(), name)
				require.Equal(t, wf.GetType(), gf.GetType(), name)
				require.Len(t, gf.Metric, len(wf.Metric), name)
				if !strings.HasPrefix(name, "pgmsg_") || strings.HasPrefix(name, "pgmsg_scrape_") ||
					strings.HasSuffix(name, "_age_seconds_max") || strings.Contains(name, "maintenance") {
					for i := range wf.Metric {
						require.Equal(t, labels(wf.Metric[i]), labels(gf.Metric[i]), name)
					}
					continue // process-wide or clock-dependent values
				}
				require.Equal(t, wf.Metric, gf.Metric, name)
			}
			lag := got["pgmsg_group_lag_records_sum"]
			require.NotNil(t, lag)
			found := false
			for _, m := range lag.Metric {
				if labels(m) == "group=billing,topic=orders," {
					require.Equal(t, wantLag, m.GetGauge().GetValue())
					found = true
				}
			}
			require.True(t, found)
			ages := got["pgmsg_group_oldest_unconsumed_age_seconds_max"].Metric
			require.Len(t, ages, 3)
			for _, m := range ages {
				if labels(m) == "group=billing,topic=orders," {
					require.Greater(t, m.GetGauge().GetValue(), 0.0, "a lagging group's age")
				} else {
					require.Equal(t, 0.0, m.GetGauge().GetValue(), labels(m))
				}
			}
		}
	}
	check(3)
	publish(2)
	check(5)
}
