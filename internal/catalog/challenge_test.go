package catalog_test

import (
	"encoding/json"
	"slices"
	"testing"

	"usher/internal/catalog"
)

func TestChallengeValidate(t *testing.T) {
	with := func(c catalog.Challenge) catalog.Config {
		cfg := catalog.Defaults("q")
		cfg.Challenge = c
		return cfg
	}
	tests := []struct {
		name string
		c    catalog.Challenge
		want []string
	}{
		{"the default: off", catalog.DefaultChallenge(), nil},
		{"the zero value is off", catalog.Challenge{}, nil},
		{"enforce, fixed", catalog.Challenge{Mode: "enforce", Difficulty: 20}, nil},
		{"log, auto within bounds, shadow", catalog.Challenge{Mode: "log", Difficulty: catalog.DifficultyAuto, Min: 14, Max: 24, Suspects: "shadow"}, nil},
		{"an unknown mode", catalog.Challenge{Mode: "on"}, []string{"challenge.mode"}},
		{"beyond 32 bits", catalog.Challenge{Mode: "enforce", Difficulty: 33}, []string{"challenge.difficulty"}},
		{"bounds upside down", catalog.Challenge{Difficulty: catalog.DifficultyAuto, Min: 20, Max: 10}, []string{"challenge.min"}},
		{"a max beyond 32", catalog.Challenge{Difficulty: catalog.DifficultyAuto, Max: 40}, []string{"challenge.max"}},
		{"a negative max", catalog.Challenge{Difficulty: catalog.DifficultyAuto, Max: -1}, []string{"challenge.max"}},
		{"a min beyond 32", catalog.Challenge{Difficulty: catalog.DifficultyAuto, Min: 33, Max: 33}, []string{"challenge.min"}},
		{"an unknown suspects", catalog.Challenge{Suspects: "block"}, []string{"challenge.suspects"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, fe := range with(tt.c).Validate() {
				got = append(got, fe.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Validate() = %v, want %v", got, tt.want)
			}
		})
	}
}

// difficulty is a number of bits or "auto" in JSON; nothing else passes
// for either.
func TestDifficultyJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    catalog.Difficulty
		wantErr bool
	}{
		{`18`, 18, false},
		{`"auto"`, catalog.DifficultyAuto, false},
		{`0`, 0, false},
		{`-1`, 33, false}, // invalid, never auto
		{`"18"`, 0, true},
		{`"AUTO"`, 0, true},
		{`1.5`, 0, true},
	}
	for _, tt := range tests {
		var c catalog.Challenge
		err := json.Unmarshal([]byte(`{"difficulty":`+tt.in+`}`), &c)
		if (err != nil) != tt.wantErr || (err == nil && c.Difficulty != tt.want) {
			t.Errorf("difficulty %s = %d, %v; want %d, error %v", tt.in, c.Difficulty, err, tt.want, tt.wantErr)
		}
	}
	for _, d := range []catalog.Difficulty{catalog.DifficultyAuto, 0, 22} {
		b, _ := json.Marshal(catalog.Challenge{Difficulty: d})
		var back catalog.Challenge
		if err := json.Unmarshal(b, &back); err != nil || back.Difficulty != d {
			t.Errorf("round trip of %d via %s = %d, %v", d, b, back.Difficulty, err)
		}
	}
}
