package jsonenc_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"usher/internal/jsonenc"
)

func FuzzSameAsEncodingJSON(f *testing.F) {
	for _, s := range []string{"", "plain-id_1.2:3@x", `"quoted"`, `back\slash`, "<b>&</b>", "\x00\x1f\x7f", "é \u2028 \u2029", "\xff\xfe"} {
		f.Add(s, int64(1764657000123456789), 0)
	}
	f.Add("x", int64(-1<<62), 3600) // a year json refuses
	f.Fuzz(func(t *testing.T, s string, ns int64, offset int) {
		want, _ := json.Marshal(s)
		if got := jsonenc.AppendString([]byte("p"), s); !bytes.Equal(got, append([]byte("p"), want...)) {
			t.Fatalf("AppendString(%q) = %s, encoding/json writes %s", s, got[1:], want)
		}
		at := time.Unix(0, ns).In(time.FixedZone("", offset%86400))
		want, wantErr := json.Marshal(at)
		got, err := jsonenc.AppendTime([]byte("p"), at)
		switch {
		case (err != nil) != (wantErr != nil):
			t.Fatalf("AppendTime(%v) error %v, encoding/json's %v", at, err, wantErr)
		case err != nil && string(got) != "p":
			t.Fatalf("AppendTime(%v) refused, yet wrote %q", at, got)
		case err == nil && !bytes.Equal(got, append([]byte("p"), want...)):
			t.Fatalf("AppendTime(%v) = %s, encoding/json writes %s", at, got[1:], want)
		}
	})
}
