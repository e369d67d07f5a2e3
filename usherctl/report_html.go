package main

import (
	"bytes"
	"fmt"
	"html/template"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/go-analyze/charts"
)

// renderReport writes the report as one HTML file: its styles inline, its
// charts SVG drawn by go-analyze/charts and inlined, nothing loaded from
// anywhere.
func renderReport(r *dropReport) ([]byte, error) {
	var cs []reportChart
	add := func(title, note string, draw func() ([]byte, error)) error {
		svg, err := draw()
		if err != nil {
			return fmt.Errorf("chart %q: %w", title, err)
		}
		cs = append(cs, reportChart{Title: title, Note: note, SVG: inlineSVG(svg)})
		return nil
	}
	tl := r.Timeline
	per := "per second"
	if tl.BucketSeconds > 1 {
		per = fmt.Sprintf("per second, averaged over %d s", tl.BucketSeconds)
	}
	labels := timeLabels(tl)
	if err := add("Arrivals and admissions", "Joins stored and shoppers made READY, "+per+".",
		func() ([]byte, error) {
			return lineChart(labels, [][]float64{tl.Arrivals, tl.Admissions}, []string{"arrivals/s", "admissions/s"})
		}); err != nil {
		return nil, err
	}
	length := make([]float64, len(tl.LineLength))
	for i, v := range tl.LineLength {
		length[i] = float64(v)
	}
	note := "Shoppers in line at the end of each bucket, reconstructed from the joins, leaves and admissions."
	if r.SoldOut != nil {
		note += " The queue closed as sold out at " + r.SoldOut.At.Format("15:04:05.000") + ": everyone still in line was told so."
	}
	if err := add("Line length", note, func() ([]byte, error) {
		return lineChart(labels, [][]float64{length}, []string{"in line"})
	}); err != nil {
		return nil, err
	}
	hl := make([]string, len(r.TimeInLineHistogram))
	hv := make([]float64, len(r.TimeInLineHistogram))
	prev := "0"
	for i, b := range r.TimeInLineHistogram {
		if b.Le == "+Inf" {
			hl[i] = "> " + prev + " s"
		} else {
			hl[i] = prev + "–" + b.Le + " s"
			prev = b.Le
		}
		hv[i] = float64(b.Count)
	}
	if err := add("Time in line", fmt.Sprintf("Shoppers admitted, by time from their join (a pre-queued shopper's: from the opening) to READY. p50 %s, p90 %s, p99 %s.",
		secs(r.TimeInLine.P50), secs(r.TimeInLine.P90), secs(r.TimeInLine.P99)),
		func() ([]byte, error) { return barChart(hl, hv, "shoppers", false) }); err != nil {
		return nil, err
	}
	ol, ov := outcomeBars(r.Outcomes)
	if err := add("What the admitted did", "Each admitted shopper once: the final status of their order, or what became of their token.",
		func() ([]byte, error) { return barChart(ol, ov, "shoppers", true) }); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err := reportPage.Execute(&buf, struct {
		R        *dropReport
		Charts   []reportChart
		Rejected []reasonCount
		Failed   []reasonCount
	}{r, cs, sortedReasons(r.Outcomes.Rejected), sortedReasons(r.Outcomes.Failed)})
	return buf.Bytes(), err
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

const chartWidth, chartHeight = 900, 360

func lineChart(labels []string, series [][]float64, names []string) ([]byte, error) {
	if len(labels) < 2 { // one bucket: a line needs two points
		labels = append(labels, labels...)
		for i := range series {
			series[i] = append(series[i], series[i]...)
		}
	}
	opt := charts.NewLineChartOptionWithData(series)
	opt.XAxis.Labels = labels
	opt.XAxis.BoundaryGap = charts.Ptr(false)
	opt.XAxis.LabelCount = min(len(labels), 10)
	opt.Legend.SeriesNames = names
	opt.YAxis[0].Min = charts.Ptr(0.0)
	opt.Symbol = charts.Symbol{Shape: charts.SymbolNone}
	opt.LineStrokeWidth = 1.5
	p := charts.NewPainter(charts.PainterOptions{OutputFormat: charts.ChartOutputSVG, Width: chartWidth, Height: chartHeight})
	if err := p.LineChart(opt); err != nil {
		return nil, err
	}
	return p.Bytes()
}

// barChart draws one bar per label; horizontal ones (labels on the
// side, the first on top) suit long labels.
func barChart(labels []string, values []float64, name string, horizontal bool) ([]byte, error) {
	if horizontal {
		labels, values = slices.Clone(labels), slices.Clone(values)
		slices.Reverse(labels)
		slices.Reverse(values)
	}
	opt := charts.NewBarChartOptionWithData([][]float64{values})
	opt.Horizontal = horizontal
	opt.CategoryAxis.Labels = labels
	opt.CategoryAxis.LabelCount = len(labels)
	opt.Legend.SeriesNames = []string{name}
	opt.Legend.Show = charts.Ptr(false)
	if len(opt.ValueAxis) == 0 {
		opt.ValueAxis = []charts.ValueAxisOption{{}}
	}
	opt.ValueAxis[0].Min = charts.Ptr(0.0)
	if horizontal {
		opt.Padding = charts.Box{Left: 40, Top: 20, Right: 40, Bottom: 20}
	} else if len(labels) > 6 {
		opt.CategoryAxis.LabelRotation = charts.DegreesToRadians(30)
	}
	opt.SeriesList[0].Label.Show = charts.Ptr(true)
	p := charts.NewPainter(charts.PainterOptions{OutputFormat: charts.ChartOutputSVG, Width: chartWidth, Height: chartHeight})
	if err := p.BarChart(opt); err != nil {
		return nil, err
	}
	return p.Bytes()
}

// xmlnsAttr matches an SVG root's namespace declarations: inline SVG in
// HTML gets its namespace from the parser, and the file names no URL.
var xmlnsAttr = regexp.MustCompile(`\s+xmlns(:\w+)?="[^"]*"`)

func inlineSVG(svg []byte) template.HTML {
	return template.HTML(xmlnsAttr.ReplaceAll(svg, nil)) // #nosec: the library's SVG, our own numbers
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
