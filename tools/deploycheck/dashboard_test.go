package deploycheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"usher/internal/testenv"
)

// The Grafana dashboard (grafana/usher.json) asks only for metrics the
// services export.
//
// How: every PromQL expression in the dashboard — each panel's targets
// (rows' nested panels too) and the queue variable's label_values() — is
// parsed with Prometheus's own PromQL parser (promql/parser), after
// Grafana's variables are replaced by values of the same syntactic kind
// ($__rate_interval and $__range by a duration, $queue by a name), and
// every vector selector's metric name is collected from the syntax tree:
// nothing is guessed from the text, and an expression that does not parse
// fails the test.
//
// What the services export is in grafana/metrics/<service>.txt: each
// service's own test (TestExportedMetricsAreListed in admitter, gateway,
// notifier and orderworker) builds the service's registry in-process as
// its run does and checks that every family listed there is one it
// describes, of that kind — from the collectors' descriptors, so a vector
// that has no sample yet counts, which a scrape would miss. A name here is
// exported when it is a listed family, or a histogram's _bucket, _sum or
// _count (a summary's _sum or _count). A metric the dashboard uses that a
// service exports but its list lacks: regenerate the list with
// USHER_UPDATE_METRICS=1 go test ./<service> -run TestExportedMetricsAreListed.
func TestTheDashboardQueriesOnlyExportedMetrics(t *testing.T) {
	exported := exportedFamilies(t)
	exprs := dashboardExprs(t, "../../deploy/grafana/usher.json")
	if len(exprs) < 20 {
		t.Fatalf("found %d PromQL expressions in the dashboard: is it the dashboard?", len(exprs))
	}
	used := map[string]bool{}
	for _, e := range exprs {
		names, err := metricNames(e.expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", e.where, e.expr, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", e.where, e.expr)
		}
		for _, n := range names {
			used[n] = true
			if why := exportedAs(n, exported); why != "" {
				t.Errorf("%s: %q uses %s, %s", e.where, e.expr, n, why)
			}
		}
	}
	// The dashboard covers what it is for: the line, admission, active vs
	// target and the adaptive limit, stock, the journey's histograms and
	// outcomes, orders, the payment breaker, the door.
	for _, want := range []string{
		"usher_waiting", "usher_admitted_total", "usher_admission_rate_per_second", "usher_active", "usher_target_active",
		"usher_adaptive_limit", "usher_stock_state", "usher_time_in_line_seconds_bucket", "usher_ready_to_order_seconds_bucket",
		"usher_order_to_final_seconds_bucket", "usher_admitted_outcomes_total", "usher_orders_total",
		"usher_payment_breaker_open", "usher_payment_breaker_shared_open", "usher_pow_checks_total", "usher_pow_difficulty",
	} {
		if !used[want] {
			t.Errorf("the dashboard has no query of %s", want)
		}
	}
}

// The parser and the name check catch what they are for: a misspelt
// metric, a histogram's bucket of a counter, an expression that is not
// PromQL.
func TestTheDashboardCheckCatchesMistakes(t *testing.T) {
	exported := map[string]string{"usher_waiting": "gauge", "usher_time_in_line_seconds": "histogram", "usher_orders_total": "counter"}
	for _, tc := range []struct {
		expr    string
		names   []string
		wantErr bool // the expression does not parse
		bad     string
	}{
		{expr: `max by (queue) (usher_waiting{queue=~"$queue"})`, names: []string{"usher_waiting"}},
		{expr: `histogram_quantile(0.9, sum by (le) (rate(usher_time_in_line_seconds_bucket[$__rate_interval])))`, names: []string{"usher_time_in_line_seconds_bucket"}},
		{expr: `{__name__="usher_waitin"}`, names: []string{"usher_waitin"}, bad: "usher_waitin"},
		{expr: `rate(usher_orders_total_bucket[5m])`, names: []string{"usher_orders_total_bucket"}, bad: "usher_orders_total_bucket"},
		{expr: `sum(usher_waiting) / on (queue) group_left usher_orders_total`, names: []string{"usher_orders_total", "usher_waiting"}},
		{expr: `sum(rate(usher_waiting[5m]) by (queue)`, wantErr: true},
	} {
		names, err := metricNames(tc.expr)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err = %v, want an error %v", tc.expr, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && strings.Join(names, ",") != strings.Join(tc.names, ",") {
			t.Errorf("%q: names %v, want %v", tc.expr, names, tc.names)
		}
		for _, n := range names {
			if bad := exportedAs(n, exported) != ""; bad != (n == tc.bad) {
				t.Errorf("%q: %s judged exported = %v", tc.expr, n, !bad)
			}
		}
	}
}

// exportedFamilies reads the services' lists: family name → kind.
func exportedFamilies(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../../deploy/grafana/metrics/*.txt")
	if err != nil || len(paths) < 4 {
		t.Fatalf("the services' metric lists: %v %v", paths, err)
	}
	out := map[string]string{}
	for _, p := range paths {
		fams, err := testenv.ReadMetricList(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if k, ok := out[f.Name]; ok && k != f.Kind {
				t.Errorf("%s is a %s in %s and a %s elsewhere", f.Name, f.Kind, p, k)
			}
			out[f.Name] = f.Kind
		}
	}
	return out
}

// exportedAs says why name is not a series the exported families make
// ("" when it is).
func exportedAs(name string, exported map[string]string) string {
	if _, ok := exported[name]; ok {
		return ""
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch kind, ok := exported[base]; {
		case !ok:
		case kind == "histogram", kind == "summary" && suffix != "_bucket":
			return ""
		default:
			return "but " + base + " is a " + kind + ", which has no " + suffix + " series"
		}
	}
	return "which no service exports (see grafana/metrics/)"
}

// grafanaVars are Grafana's variables, each replaced by a value of the
// same syntactic kind before parsing.
var grafanaVars = regexp.MustCompile(`\$\{[^}]+\}|\$\w+|\[\[\w+\]\]`)

func substitute(expr string) string {
	return grafanaVars.ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}[]")
		name, _, _ = strings.Cut(name, ":")
		switch name {
		case "__rate_interval", "__interval", "__range", "interval":
			return "5m"
		case "__range_s", "__interval_ms", "__range_ms":
			return "300"
		}
		return "v"
	})
}

// metricNames parses a PromQL expression and returns the metric names its
// selectors select, sorted.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(substitute(expr))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name != "" {
			seen[name] = true
		}
		return nil
	})
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

type dashExpr struct{ where, expr string }

// labelValues is Grafana's label_values(metric, label) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*\w+\s*\)\s*$`)

// dashboardExprs finds every PromQL expression in the dashboard: panel
// targets' expr (in rows too) and query variables.
func dashboardExprs(t *testing.T, path string) []dashExpr {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string            `json:"uid"`
		Title      string            `json:"title"`
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: the dashboard needs a uid and a title", path)
	}
	var out []dashExpr
	ids := map[int]bool{}
	var walk func(raw []json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p struct {
				ID         int                   `json:"id"`
				Type       string                `json:"type"`
				Title      string                `json:"title"`
				Datasource *struct{ UID string } `json:"datasource"`
				Panels     []json.RawMessage     `json:"panels"`
				Targets    []struct {
					Expr       string                `json:"expr"`
					Datasource *struct{ UID string } `json:"datasource"`
				} `json:"targets"`
			}
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: a panel: %v", path, err)
			}
			if ids[p.ID] {
				t.Errorf("%s: panel id %d used twice", path, p.ID)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q does not use the dashboard's datasource variable", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q has a target without a PromQL expression", p.Title)
				}
				out = append(out, dashExpr{"panel " + p.Title, tg.Expr})
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct{ Query string }
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
			q = obj.Query
		}
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		out = append(out, dashExpr{"variable " + v.Name, q})
	}
	return out
}
