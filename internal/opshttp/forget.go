package opshttp

import "github.com/prometheus/client_golang/prometheus"

// ForgetQueue drops every series labelled queue q from vecs, once the
// queue is deleted: each queue ever deleted would otherwise stay in
// memory and in every scrape for as long as the process runs.
func ForgetQueue(q string, vecs ...interface{ DeletePartialMatch(prometheus.Labels) int }) {
	of := prometheus.Labels{"queue": q}
	for _, v := range vecs {
		v.DeletePartialMatch(of)
	}
}
