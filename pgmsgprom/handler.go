package pgmsgprom

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/pgmsg/pgmsg"
)

// Handler serves the metrics of g, a registry c is registered with, in
// Prometheus's text format (promhttp.HandlerFor(g, promhttp.HandlerOpts{})
// for a text scrape), except that c's topic and group totals (the
// pgmsg_topic_* and pgmsg_group_*_sum series, four per topic and per
// group) are written from a rendering kept while LogTotals answers the
// same figures: an idle estate of 10,000 topics and groups is 80,000
// series that client_golang otherwise converts, checks, sorts and encodes
// on every scrape (~175 ms of CPU each). Only the ages of lagging groups,
// which grow with the clock, are written anew each time.
//
// Once Handler is called, c leaves its totals out of what it sends to
// registries: scrape g through the handler, not through another one.
// Scrapes through the handler run one at a time. A gzip response
// (Accept-Encoding: gzip) is one gzip stream whose kept part is
// compressed once per rendering.
func (c *Collector) Handler(g prometheus.Gatherer) http.Handler {
	c.seriesMu.Lock()
	c.rendered = true
	c.seriesMu.Unlock()
	return &handler{c: c, g: g}
}

type handler struct {
	mu sync.Mutex // one scrape at a time; guards tr
	c  *Collector
	g  prometheus.Gatherer
	tr totalsRender
}

// totalsRender is the text of the totals for the figures it was written
// from: static, every series but the ages of lagging groups, ending with
// the ages' family header and its series for groups that do not lag (so
// that the lagging ones, written after it, stay in the family); z is
// static as raw deflate blocks ending on a sync flush.
type totalsRender struct {
	topics []pgmsg.TopicTotals
	groups []pgmsg.GroupTotals
	valid  bool
	static []byte
	z      []byte
	aged   []int
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	mfs, err := h.g.Gather()
	if err != nil {
		http.Error(w, "An error has occurred while gathering metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	var rest bytes.Buffer
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	enc := expfmt.NewEncoder(&rest, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			http.Error(w, "An error has occurred while encoding metrics:\n\n"+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	c := h.c
	c.seriesMu.Lock()
	snap, at := c.last, c.lastAt
	c.seriesMu.Unlock()
	if snap == nil {
		snap = &snapshot{}
	}
	tr := &h.tr
	if !tr.valid || !slices.Equal(tr.topics, snap.topics) || !slices.Equal(tr.groups, snap.gtotal) {
		c.renderTotals(tr, snap)
	}
	aged := c.renderAged(tr, at)

	w.Header().Set("Content-Type", string(format))
	if !acceptsGzip(r) {
		w.Header().Set("Content-Length", strconv.Itoa(rest.Len()+len(tr.static)+len(aged)))
		_, _ = w.Write(rest.Bytes())
		_, _ = w.Write(tr.static)
		_, _ = w.Write(aged)
		return
	}
	// One gzip member: its deflate data is the three parts' blocks one
	// after another (each part compressed on its own and ended on a sync
	// flush, byte-aligned and not final), then an empty final block; the
	// trailer's CRC-32 and length are the whole text's.
	restZ, aZ := deflateSync(rest.Bytes(), flate.BestSpeed), deflateSync(aged, flate.BestSpeed)
	crc := crc32.ChecksumIEEE(rest.Bytes())
	crc = crc32.Update(crc, crc32.IEEETable, tr.static)
	crc = crc32.Update(crc, crc32.IEEETable, aged)
	var trailer [8]byte
	binary.LittleEndian.PutUint32(trailer[:4], crc)
	binary.LittleEndian.PutUint32(trailer[4:], uint32(rest.Len()+len(tr.static)+len(aged)))
	w.Header().Set("Content-Encoding", "gzip")
	w.Header().Add("Vary", "Accept-Encoding")
	_, _ = w.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	_, _ = w.Write(restZ)
	_, _ = w.Write(tr.z)
	_, _ = w.Write(aZ)
	_, _ = w.Write([]byte{1, 0, 0, 0xff, 0xff}) // final empty stored block
	_, _ = w.Write(trailer[:])
}

// acceptsGzip tells whether the request accepts a gzip response.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// deflateSync compresses p into raw deflate blocks ending on a sync flush
// (not a final block), so that other blocks can follow.
func deflateSync(p []byte, level int) []byte {
	var b bytes.Buffer
	fw, _ := flate.NewWriter(&b, level) // a valid level: no error
	_, _ = fw.Write(p)
	_ = fw.Flush()
	return b.Bytes()
}

// renderTotals writes the totals of snap into tr.
func (c *Collector) renderTotals(tr *totalsRender, snap *snapshot) {
	var b []byte
	family := func(d *prometheus.Desc, n int) {
		if n == 0 {
			return
		}
		h := c.help[d]
		b = append(b, "# HELP "...)
		b = append(b, h[0]...)
		b = append(b, ' ')
		b = append(b, helpEscaper.Replace(h[1])...)
		b = append(b, "\n# TYPE "...)
		b = append(b, h[0]...)
		b = append(b, " gauge\n"...)
	}
	topics, groups := snap.topics, snap.gtotal
	for _, f := range []struct {
		d *prometheus.Desc
		v func(t pgmsg.TopicTotals) float64
	}{
		{c.topicEnd, func(t pgmsg.TopicTotals) float64 { return float64(t.EndOffset) }},
		{c.topicStart, func(t pgmsg.TopicTotals) float64 { return float64(t.StartOffset) }},
		{c.topicParts, func(t pgmsg.TopicTotals) float64 { return float64(t.Partitions) }},
		{c.topicSegments, func(t pgmsg.TopicTotals) float64 { return float64(t.Segments) }},
	} {
		family(f.d, len(topics))
		for _, t := range topics {
			b = appendSample(b, c.help[f.d][0], f.v(t), "topic", t.Topic)
		}
	}
	for _, f := range []struct {
		d *prometheus.Desc
		v func(g pgmsg.GroupTotals) float64
	}{
		{c.groupNextSum, func(g pgmsg.GroupTotals) float64 { return float64(g.NextOffset) }},
		{c.groupLagSum, func(g pgmsg.GroupTotals) float64 { return float64(g.Lag) }},
		{c.groupSkippedSum, func(g pgmsg.GroupTotals) float64 { return float64(g.Skipped) }},
	} {
		family(f.d, len(groups))
		for _, g := range groups {
			b = appendSample(b, c.help[f.d][0], f.v(g), "group", g.Group, "topic", g.Topic)
		}
	}
	// The ages last: those of groups that do not lag are 0 and kept; the
	// lagging ones are written after them on each scrape.
	family(c.groupAgeMax, len(groups))
	tr.aged = tr.aged[:0]
	for i, g := range groups {
		if !g.OldestUnconsumed.IsZero() {
			tr.aged = append(tr.aged, i)
			continue
		}
		b = appendSample(b, c.help[c.groupAgeMax][0], 0, "group", g.Group, "topic", g.Topic)
	}
	tr.topics, tr.groups, tr.valid = topics, groups, true
	tr.static = b
	tr.z = deflateSync(b, flate.DefaultCompression)
}

// renderAged writes the ages of the lagging groups of tr at now.
func (c *Collector) renderAged(tr *totalsRender, now time.Time) []byte {
	var b []byte
	for _, i := range tr.aged {
		g := tr.groups[i]
		b = appendSample(b, c.help[c.groupAgeMax][0], max(now.Sub(g.OldestUnconsumed).Seconds(), 0), "group", g.Group, "topic", g.Topic)
	}
	return b
}

// helpEscaper escapes a HELP text as the text format asks.
var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

// labelEscaper escapes a label value as the text format asks.
var labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)

// appendSample appends one sample line, name{k="v",...} value (kv sorted
// by label name, as client_golang sorts label pairs), written
// as client_golang's text encoder writes it.
func appendSample(b []byte, name string, v float64, kv ...string) []byte {
	b = append(b, name...)
	if len(kv) > 0 {
		b = append(b, '{')
		for i := 0; i < len(kv); i += 2 {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, kv[i]...)
			b = append(b, `="`...)
			b = append(b, labelEscaper.Replace(kv[i+1])...)
			b = append(b, '"')
		}
		b = append(b, '}')
	}
	b = append(b, ' ')
	switch v {
	case 0:
		b = append(b, '0')
	case 1:
		b = append(b, '1')
	case -1:
		b = append(b, "-1"...)
	default:
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
	}
	return append(b, '\n')
}
