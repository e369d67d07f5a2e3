package main

import (
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// A value axis runs from zero to a round top in about five ticks of 1, 2
// or 5 times a power of ten; counts get whole ticks, thousands read as k.
func TestAChartsValueAxisHasRoundTicks(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		want   []string
	}{
		{"rates", []float64{12.5, 398.2}, []string{"0", "100", "200", "300", "400"}},
		{"thousands", []float64{24600}, []string{"0", "5k", "10k", "15k", "20k", "25k"}},
		{"small rates", []float64{0.35}, []string{"0", "0.1", "0.2", "0.3", "0.4"}},
		{"a few shoppers", []float64{2, 1}, []string{"0", "1", "2"}},
		{"nothing", []float64{0}, []string{"0", "1"}},
		{"no values", nil, []string{"0", "1"}},
	}
	for _, tt := range tests {
		s := scaleOf(tt.values)
		var got []string
		for _, v := range s.ticks() {
			got = append(got, s.label(v))
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: ticks of %v = %q, want %q", tt.name, tt.values, got, tt.want)
		}
	}
}

// Labels reach the SVG as text, never as markup: an outcome's reason
// comes from an event and may hold anything.
func TestAChartWritesItsLabelsAsText(t *testing.T) {
	label := `<script>alert(1)</script> & "co"` // within maxLabelRunes
	for _, horizontal := range []bool{false, true} {
		doc, err := html.Parse(strings.NewReader(string(barChart([]string{label, "paid"}, []float64{3, 5}, horizontal))))
		if err != nil {
			t.Fatal(err)
		}
		var texts []string
		var walk func(*html.Node)
		walk = func(n *html.Node) {
			if n.Type == html.ElementNode && n.Data == "script" {
				t.Errorf("horizontal %v: the chart holds a <script>", horizontal)
			}
			if n.Type == html.ElementNode && n.Data == "text" && n.FirstChild != nil {
				texts = append(texts, n.FirstChild.Data)
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				walk(c)
			}
		}
		walk(doc)
		if !strings.Contains(strings.Join(texts, "\n"), label) {
			t.Errorf("horizontal %v: texts %q lack the label %q", horizontal, texts, label)
		}
	}
}

// A line has a point per value; a single value is a level line across
// the chart, not a dot nobody sees.
func TestALineChartDrawsAPointPerValue(t *testing.T) {
	tests := []struct {
		values []float64
		points int
	}{
		{[]float64{1, 4, 2, 8}, 4},
		{[]float64{3}, 2},
	}
	for _, tt := range tests {
		labels := make([]string, len(tt.values))
		for i := range labels {
			labels[i] = "09:00:0" + string(rune('0'+i))
		}
		svg := string(lineChart(labels, chartSeries{"arrivals/s", tt.values}))
		_, rest, ok := strings.Cut(svg, `<polyline points="`)
		if !ok {
			t.Fatalf("line chart of %v has no polyline:\n%s", tt.values, svg)
		}
		pts, _, _ := strings.Cut(rest, `"`)
		if got := len(strings.Fields(pts)); got != tt.points {
			t.Errorf("line chart of %v has %d points (%s), want %d", tt.values, got, pts, tt.points)
		}
	}
}
