package main

import (
	"context"
	"strings"
	"testing"
)

func TestEveryCommandHasHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "Usage:"},
		{[]string{"help"}, "usherctl queue"},
		{[]string{"queue", "--help"}, "usherctl queue create|set|get|list|pause|resume|close"},
		{[]string{"queue", "set", "-h"}, "-target-active"},
		{[]string{"replay", "--help"}, `{"seq":N,"stream":"USHER_ENTRIES"`},
		{[]string{"rebuild", "--help"}, "--force"},
		{[]string{"audit", "--help"}, "exit status 0 when clean"},
	}
	for _, tt := range tests {
		var out, errb strings.Builder
		err := run(context.Background(), tt.args, func(string) string { return "" }, strings.NewReader(""), &out, &errb)
		if code := exitCode(err); code != 0 {
			t.Errorf("usherctl %v: exit %d (%v), want 0", tt.args, code, err)
		}
		if !strings.Contains(strings.ToLower(out.String()), strings.ToLower(tt.want)) {
			t.Errorf("usherctl %v printed %q, want it to contain %q", tt.args, out.String(), tt.want)
		}
	}
}

func TestBadCommandLinesExitWithStatusTwo(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the error
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"queue"}, "want a verb"},
		{[]string{"queue", "explode", "q1"}, `unknown verb "explode"`},
		{[]string{"queue", "set", "q1"}, "give at least one of"},
		{[]string{"queue", "get"}, "want a queue name"},
		{[]string{"queue", "get", "bad name!"}, "is not a queue name"},
		{[]string{"queue", "pause", "q1", "--tick-ms", "50"}, "takes no configuration flags"},
		{[]string{"queue", "set", "q1", "--token-ttl", "1.5s"}, "whole seconds"},
		{[]string{"queue", "set", "q1", "--target-active", "many"}, "invalid value"},
		{[]string{"queue", "set", "q1", "--target-active", "-5"}, "--target-active -5: targetActive must be 1..1000000"},
		{[]string{"queue", "set", "q1", "--state", "weird"}, "--state weird: state must be open, paused or closed"},
		{[]string{"queue", "set", "q1", "--max-admit-per-tick", "-1"}, "--max-admit-per-tick -1"},
		{[]string{"queue", "set", "q1", "--tick-ms", "5"}, "--tick-ms 5: tickMs must be 10..60000"},
		{[]string{"queue", "set", "q1", "--token-ttl", "0s"}, "--token-ttl 0s"},
		{[]string{"queue", "set", "q1", "--token-ttl", "48h"}, "tokenTtlSeconds must be 1..86400"},
		{[]string{"queue", "create", "q1", "--target-active", "0", "--state", "on"}, "targetActive must be 1..1000000; --state on"},
		{[]string{"queue", "create", "q1", "--adaptive", "on"}, "adaptive min and max must be 1..100000"},
		{[]string{"queue", "create", "q1", "--adaptive", "on", "--adaptive-min", "5", "--adaptive-max", "10"}, "min <= targetActive <= max"},
		{[]string{"replay", "--queue", "q1"}, "--stream is required"},
		{[]string{"replay", "--stream", "entries"}, "--queue is required"},
		{[]string{"replay", "--stream", "bogus", "--queue", "q1"}, `--stream "bogus"`},
		{[]string{"replay", "--stream", "entries", "--queue", "q1", "--since", "1m", "--from-seq", "3"}, "at most one of"},
		{[]string{"replay", "--stream", "entries", "--queue", "q1", "--from-time", "yesterday"}, "RFC3339"},
		{[]string{"replay", "--stream", "entries", "--queue", "q1", "--until", "soon"}, "--until"},
		{[]string{"replay", "--stream", "entries", "--queue", "q1", "--format", "xml"}, "--format"},
		{[]string{"replay", "--stream", "entries", "--queue", "q1", "--max", "0"}, "--max"},
		{[]string{"replay", "--stream", "entries", "--queue", "q1", "--yes"}, "--yes only goes with --republish"},
		{[]string{"replay", "--stream", "entries", "--queue", "q1", "--republish", "usher.admitted.q1"}, "USHER_ADMISSIONS"},
		{[]string{"replay", "--stream", "entries", "--queue", "q1", "--republish", "svc.*"}, "literal subject"},
		{[]string{"replay", "--nope"}, "flag provided but not defined: -nope"},
		{[]string{"rebuild"}, "--queue is required"},
		{[]string{"rebuild", "--queue", "q1", "extra"}, "unexpected arguments"},
		{[]string{"audit", "--queue", ""}, "--queue is required"},
		{[]string{"audit", "--queue", "q1", "--show", "-1"}, "--show"},
	}
	for _, tt := range tests {
		var out, errb strings.Builder
		err := run(context.Background(), tt.args, func(string) string { return "" }, strings.NewReader(""), &out, &errb)
		if code := exitCode(err); code != exitUsage {
			t.Errorf("usherctl %v: exit %d (%v), want %d", tt.args, code, err, exitUsage)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("usherctl %v: error %q, want it to contain %q", tt.args, err, tt.want)
		}
		if len(tt.args) > 0 && strings.Contains(err.Error(), tt.args[0]+": "+tt.args[0]+":") {
			t.Errorf("usherctl %v: error %q names the command twice", tt.args, err)
		}
	}
}
