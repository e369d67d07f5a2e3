package main

import (
	"bytes"
	"fmt"
	"html/template"
	"sort"
	"time"
)

// renderReport writes the report as one HTML file: its styles inline, its
// charts SVG drawn by svgchart.go and inlined, nothing loaded from
// anywhere.
func renderReport(r *dropReport) ([]byte, error) {
	var buf bytes.Buffer
	err := reportPage.Execute(&buf, struct {
		R        *dropReport
		Charts   []reportChart
		Rejected []reasonCount
		Failed   []reasonCount
	}{r, reportCharts(r), sortedReasons(r.Outcomes.Rejected), sortedReasons(r.Outcomes.Failed)})
	return buf.Bytes(), err
}

// reportCharts are the report's four charts: arrivals and admissions,
// the line's length, time in line and what the admitted did.
func reportCharts(r *dropReport) []reportChart {
	tl := r.Timeline
	per := "per second"
	if tl.BucketSeconds > 1 {
		per = fmt.Sprintf("per second, averaged over %d s", tl.BucketSeconds)
	}
	labels := timeLabels(tl)
	length := make([]float64, len(tl.LineLength))
	for i, v := range tl.LineLength {
		length[i] = float64(v)
	}
	lengthNote := "Shoppers in line at the end of each bucket, reconstructed from the joins, leaves and admissions."
	if r.SoldOut != nil {
		lengthNote += " The queue closed as sold out at " + r.SoldOut.At.Format("15:04:05.000") + ": everyone still in line was told so."
	}
	hl, hv := timeInLineBars(r.TimeInLineHistogram)
	ol, ov := outcomeBars(r.Outcomes)
	return []reportChart{
		{Title: "Arrivals and admissions", Note: "Joins stored and shoppers made READY, " + per + ".",
			SVG: lineChart(labels, chartSeries{"arrivals/s", tl.Arrivals}, chartSeries{"admissions/s", tl.Admissions})},
		{Title: "Line length", Note: lengthNote, SVG: lineChart(labels, chartSeries{"in line", length})},
		{Title: "Time in line", Note: fmt.Sprintf("Shoppers admitted, by time from their join (a pre-queued shopper's: from the opening) to READY. p50 %s, p90 %s, p99 %s.",
			secs(r.TimeInLine.P50), secs(r.TimeInLine.P90), secs(r.TimeInLine.P99)),
			SVG: barChart(hl, hv, false)},
		{Title: "What the admitted did", Note: "Each admitted shopper once: the final status of their order, or what became of their token.",
			SVG: barChart(ol, ov, true)},
	}
}

// timeInLineBars labels the histogram's buckets as ranges of seconds.
func timeInLineBars(h []bucket) ([]string, []float64) {
	labels := make([]string, len(h))
	values := make([]float64, len(h))
	prev := "0"
	for i, b := range h {
		if b.Le == "+Inf" {
			labels[i] = "> " + prev + " s"
		} else {
			labels[i] = prev + "–" + b.Le + " s"
			prev = b.Le
		}
		values[i] = float64(b.Count)
	}
	return labels, values
}

type reportChart struct {
	Title, Note string
	SVG         template.HTML
}

type reasonCount struct {
	Reason string
	Count  int
}

func sortedReasons(m map[string]int) []reasonCount {
	out := make([]reasonCount, 0, len(m))
	for k, v := range m {
		out = append(out, reasonCount{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

func outcomeBars(o outcomes) ([]string, []float64) {
	labels := []string{"paid"}
	values := []float64{float64(o.Paid)}
	for _, rc := range sortedReasons(o.Rejected) {
		labels, values = append(labels, "rejected: "+rc.Reason), append(values, float64(rc.Count))
	}
	for _, rc := range sortedReasons(o.Failed) {
		labels, values = append(labels, "failed: "+rc.Reason), append(values, float64(rc.Count))
	}
	labels = append(labels, "pending", "expired", "left", "active")
	values = append(values, float64(o.Pending), float64(o.Expired), float64(o.Left), float64(o.Active))
	return labels, values
}

// timeLabels names each bucket by its start, as HH:MM:SS UTC.
func timeLabels(tl timeline) []string {
	n := len(tl.LineLength)
	out := make([]string, n)
	for i := range out {
		out[i] = tl.Start.Add(time.Duration(i*tl.BucketSeconds) * time.Second).UTC().Format("15:04:05")
	}
	return out
}

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"stamp": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") },
	"secs":  secs,
	"pct": func(n, of int) string {
		if of == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f %%", 100*float64(n)/float64(of))
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>usher report: {{.R.Queue}}</title>
<style>
body { font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 960px; padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; }
h2 { font-size: 1.15rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
.sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { text-align: left; padding: .2rem .8rem .2rem 0; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1rem 0; }
figcaption { color: #555; font-size: .9rem; }
svg { max-width: 100%; height: auto; }
code { font-size: .85rem; word-break: break-all; }
</style>
</head>
<body>
<h1>Queue {{.R.Queue}}</h1>
<p class="sub">From the event streams: {{stamp .R.From}} to {{stamp .R.To}} (UTC). Generated {{stamp .R.GeneratedAt}} by usherctl report.</p>

<h2>Summary</h2>
<table>
<tr><th>Arrivals (joins)</th><td class="n">{{.R.Totals.Joins}}</td><td>{{.R.Totals.Shoppers}} places in line</td></tr>
<tr><th>Longest line</th><td class="n">{{.R.PeakLineLength.Value}}</td><td>{{with .R.PeakLineLength.At}}at {{stamp .}}{{end}}</td></tr>
<tr><th>Admitted</th><td class="n">{{.R.Totals.Admissions}}</td><td></td></tr>
<tr><th>Left while waiting</th><td class="n">{{.R.Totals.LeftWhileWaiting}}</td><td>of {{.R.Totals.Leaves}} leaves</td></tr>
<tr><th>Orders</th><td class="n">{{.R.Totals.Orders}}</td><td></td></tr>
{{with .R.SoldOut}}<tr><th>Sold out</th><td class="n">{{stamp .At}}</td><td>{{secs .AfterSeconds}} after the start; {{.Waiting}} still in line; by {{.By}}</td></tr>{{end}}
{{if .R.Malformed}}<tr><th>Malformed events</th><td class="n">{{.R.Malformed}}</td><td>skipped</td></tr>{{end}}
</table>

<h2>Waits</h2>
<table>
<tr><th></th><th>count</th><th>p50</th><th>p90</th><th>p99</th><th>mean</th><th>max</th></tr>
<tr><th>Time in line (join → READY)</th><td class="n">{{.R.TimeInLine.Count}}</td><td class="n">{{secs .R.TimeInLine.P50}}</td><td class="n">{{secs .R.TimeInLine.P90}}</td><td class="n">{{secs .R.TimeInLine.P99}}</td><td class="n">{{secs .R.TimeInLine.Mean}}</td><td class="n">{{secs .R.TimeInLine.Max}}</td></tr>
<tr><th>READY → order</th><td class="n">{{.R.ReadyToOrder.Count}}</td><td class="n">{{secs .R.ReadyToOrder.P50}}</td><td class="n">{{secs .R.ReadyToOrder.P90}}</td><td class="n">{{secs .R.ReadyToOrder.P99}}</td><td class="n">{{secs .R.ReadyToOrder.Mean}}</td><td class="n">{{secs .R.ReadyToOrder.Max}}</td></tr>
<tr><th>Order → final status</th><td class="n">{{.R.OrderToFinal.Count}}</td><td class="n">{{secs .R.OrderToFinal.P50}}</td><td class="n">{{secs .R.OrderToFinal.P90}}</td><td class="n">{{secs .R.OrderToFinal.P99}}</td><td class="n">{{secs .R.OrderToFinal.Mean}}</td><td class="n">{{secs .R.OrderToFinal.Max}}</td></tr>
</table>

<h2>Outcomes of the {{.R.Outcomes.Admitted}} admitted</h2>
<table>
<tr><th>Paid</th><td class="n">{{.R.Outcomes.Paid}}</td><td class="n">{{pct .R.Outcomes.Paid .R.Outcomes.Admitted}}</td></tr>
{{range .Rejected}}<tr><th>Rejected: {{.Reason}}</th><td class="n">{{.Count}}</td><td class="n">{{pct .Count $.R.Outcomes.Admitted}}</td></tr>{{end}}
{{range .Failed}}<tr><th>Failed: {{.Reason}}</th><td class="n">{{.Count}}</td><td class="n">{{pct .Count $.R.Outcomes.Admitted}}</td></tr>{{end}}
<tr><th>Pending</th><td class="n">{{.R.Outcomes.Pending}}</td><td class="n">{{pct .R.Outcomes.Pending .R.Outcomes.Admitted}}</td></tr>
<tr><th>Token expired unused</th><td class="n">{{.R.Outcomes.Expired}}</td><td class="n">{{pct .R.Outcomes.Expired .R.Outcomes.Admitted}}</td></tr>
<tr><th>Left</th><td class="n">{{.R.Outcomes.Left}}</td><td class="n">{{pct .R.Outcomes.Left .R.Outcomes.Admitted}}</td></tr>
<tr><th>Still holding a token</th><td class="n">{{.R.Outcomes.Active}}</td><td class="n">{{pct .R.Outcomes.Active .R.Outcomes.Admitted}}</td></tr>
</table>

{{with .R.Lottery}}<h2>Lottery</h2>
<table>
<tr><th>Opened</th><td>{{stamp .OpensAt}}</td></tr>
<tr><th>Drawn</th><td>{{stamp .DrawnAt}}</td></tr>
<tr><th>Pre-queued</th><td>{{.Entries}} (joins up to entries sequence {{.EntriesCursor}})</td></tr>
<tr><th>Seed</th><td><code>{{.Seed}}</code></td></tr>
<tr><th>Commitment</th><td><code>{{.Commitment}}</code></td></tr>
<tr><th>Order digest</th><td><code>{{.OrderDigest}}</code></td></tr>
</table>
<p>usherctl audit checks the draw against the commitment and recomputes the order.</p>{{end}}

<h2>Charts</h2>
{{range .Charts}}<figure class="chart">
<figcaption><strong>{{.Title}}</strong>. {{.Note}}</figcaption>
{{.SVG}}
</figure>
{{end}}
</body>
</html>
`))
