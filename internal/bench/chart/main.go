// Command chart draws docs/benchmarks/chart.svg from the JSON summaries of
// `pgmsg bench` (one file per scenario): one panel per scenario, one bar
// per implementation and figure, each panel on its own scale, labelled
// with the value and its ratio to pgmsg.
//
//	go run ./internal/bench/chart -o docs/benchmarks/chart.svg docs/benchmarks/*.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type row struct {
	impl, metric string
	value        float64
	ratio        float64 // pgmsg / this (0 for pgmsg itself)
}

type panel struct {
	title, subtitle string
	rows            []row
}

var colors = map[string]string{"pgmsg": "#2b6cb0", "seed": "#8a8f98", "copy": "#c2c7cf", "river": "#dd6b20"}

var metrics = []struct{ key, label string }{
	{"writes_per_sec", "writes/s"}, {"reads_per_sec", "reads/s"}, {"jobs_per_sec", "jobs/s"},
}

func main() {
	out := flag.String("o", "chart.svg", "output SVG file")
	md := flag.Bool("md", false, "print a Markdown table of the figures on stdout instead of drawing")
	flag.Parse()
	files := flag.Args()
	sort.Strings(files)
	if *md {
		if err := markdown(files); err != nil {
			fmt.Fprintln(os.Stderr, "chart:", err)
			os.Exit(1)
		}
		return
	}
	var panels []panel
	for _, f := range files {
		p, err := load(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chart:", err)
			os.Exit(1)
		}
		if len(p.rows) > 0 {
			panels = append(panels, p)
		}
	}
	if err := os.WriteFile(*out, []byte(render(panels)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func load(path string) (panel, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return panel{}, err
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		return panel{}, fmt.Errorf("%s: %w", path, err)
	}
	cols := []map[string]any{s}
	if bs, ok := s["baseline"].([]any); ok {
		for _, x := range bs {
			if m, ok := x.(map[string]any); ok {
				cols = append(cols, m)
			}
		}
	}
	p := panel{title: strings.TrimSuffix(filepath.Base(path), ".json"), subtitle: settings(s)}
	for _, m := range metrics {
		base, _ := s[m.key].(float64)
		for _, c := range cols {
			v, ok := c[m.key].(float64)
			if !ok || v == 0 {
				continue
			}
			r := row{impl: fmt.Sprint(c["impl"]), metric: m.label, value: v}
			if c["impl"] != s["impl"] && v > 0 {
				// The summary's ratio is the median of the per-round
				// ratios; the ratio of the medians is the fallback.
				r.ratio = base / v
				if vs, ok := s[fmt.Sprintf("vs_%v", c["impl"])].(map[string]any); ok {
					if x, ok := vs[m.key].(float64); ok {
						r.ratio = x
					}
				}
			}
			p.rows = append(p.rows, r)
		}
	}
	return p, nil
}

func settings(s map[string]any) string {
	num := func(k string) string {
		if v, ok := s[k].(float64); ok {
			return fmt.Sprintf("%g", v)
		}
		return "?"
	}
	if s["mode"] == "queue" {
		t := fmt.Sprintf("queue: %s workers, %s B payload, %s prefilled jobs", num("workers"), num("payload"), num("jobs"))
		if r, _ := s["rate"].(float64); r > 0 {
			t += fmt.Sprintf(", %s jobs/s enqueued during the run", num("rate"))
		}
		return t
	}
	t := fmt.Sprintf("pubsub: %s producers x batch %s, %s partitions, %s B", num("producers"), num("batch"), num("partitions"), num("payload"))
	if s["producers"] == float64(0) {
		t = fmt.Sprintf("pubsub, consume only: %s partitions, %s B", num("partitions"), num("payload"))
	}
	if g, _ := s["groups"].(float64); g > 0 {
		t += fmt.Sprintf(", %s groups (claim %s)", num("groups"), num("claim_batch"))
	}
	if r, _ := s["rate"].(float64); r > 0 {
		t += fmt.Sprintf(", capped at %s writes/s", num("rate"))
	}
	if p, _ := s["prefill"].(float64); p > 0 {
		t += fmt.Sprintf(", %s prefilled", num("prefill"))
	}
	return t
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func render(panels []panel) string {
	const (
		width  = 960
		left   = 150
		barMax = 560
		rowH   = 22
		headH  = 44
		gap    = 18
	)
	height := 40
	for _, p := range panels {
		height += headH + rowH*len(p.rows) + gap
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="12" y="24" font-size="16" font-weight="bold">pgmsg bench, side by side (label: median value; pgmsg ÷ it)</text>`+"\n")
	y := 40
	for _, p := range panels {
		fmt.Fprintf(&b, `<text x="12" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", y+18, html.EscapeString(p.title))
		fmt.Fprintf(&b, `<text x="12" y="%d" fill="#555">%s</text>`+"\n", y+35, html.EscapeString(p.subtitle))
		y += headH
		top := 0.0
		for _, r := range p.rows {
			top = max(top, r.value)
		}
		for _, r := range p.rows {
			w := int(float64(barMax) * r.value / top)
			col := colors[r.impl]
			if col == "" {
				col = "#999"
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s %s</text>`+"\n", left-8, y+15, html.EscapeString(r.impl), r.metric)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", left, y+3, max(w, 1), rowH-6, col)
			label := human(r.value)
			if r.ratio > 0 {
				label += fmt.Sprintf("   (pgmsg %.2fx)", r.ratio)
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left+max(w, 1)+6, y+15, label)
			y += rowH
		}
		y += gap
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// markdown prints one table row per implementation and scenario, with
// pgmsg's ratios to each baseline (medians of the per-round ratios).
func markdown(files []string) error {
	fmt.Println("| scenario | impl | writes/s | reads/s | jobs/s | publish p50 / p99 ms | e2e p50 / p99 ms | pgmsg ÷ this (rate) | rounds (rate) |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---|")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var s map[string]any
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		cols := []map[string]any{s}
		if bs, ok := s["baseline"].([]any); ok {
			for _, x := range bs {
				cols = append(cols, x.(map[string]any))
			}
		}
		key := "writes_per_sec"
		switch {
		case s["mode"] == "queue":
			key = "jobs_per_sec"
		case s["producers"] == float64(0):
			key = "reads_per_sec"
		}
		rounds, _ := s["rounds"].([]any)
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		for i, c := range cols {
			num := func(k string) string {
				v, ok := c[k].(float64)
				if !ok || v == 0 {
					return "–"
				}
				if v >= 1000 {
					return fmt.Sprintf("%.0f", v)
				}
				return fmt.Sprintf("%g", v)
			}
			pair := func(a, b string) string {
				if num(a) == "–" && num(b) == "–" {
					return "–"
				}
				return num(a) + " / " + num(b)
			}
			vs := "–"
			if i > 0 {
				if m, ok := s[fmt.Sprintf("vs_%v", c["impl"])].(map[string]any); ok {
					if r, ok := m[key].(float64); ok {
						vs = fmt.Sprintf("**%.2f×**", r)
					}
				}
			}
			var rs []string
			if i < len(rounds) {
				for _, r := range rounds[i].([]any) {
					if v, ok := r.(map[string]any)[key].(float64); ok {
						rs = append(rs, human(v))
					}
				}
			}
			scen := ""
			if i == 0 {
				scen = "`" + name + "`"
			}
			fmt.Printf("| %s | %v | %s | %s | %s | %s | %s | %s | %s |\n", scen, c["impl"], num("writes_per_sec"), num("reads_per_sec"),
				num("jobs_per_sec"), pair("publish_p50_ms", "publish_p99_ms"), pair("e2e_p50_ms", "e2e_p99_ms"), vs, strings.Join(rs, ", "))
		}
	}
	return nil
}
