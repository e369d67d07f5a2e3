package waitqueue

import (
	"reflect"
	"testing"
)

func TestParseAddrMap(t *testing.T) {
	tests := []struct {
		spec    string
		want    map[string]string
		wantErr bool
	}{
		{"127.0.0.1:7001=127.0.0.1:9001", map[string]string{"127.0.0.1:7001": "127.0.0.1:9001"}, false},
		{" a:1=b:2 , c:3=d:4 ,", map[string]string{"a:1": "b:2", "c:3": "d:4"}, false},
		{"a:1", nil, true},
		{"a=b:2", nil, true},
		{"a:1=b", nil, true},
	}
	for _, tt := range tests {
		got, err := parseAddrMap(tt.spec)
		if (err != nil) != tt.wantErr || (!tt.wantErr && !reflect.DeepEqual(got, tt.want)) {
			t.Errorf("parseAddrMap(%q) = %v, %v; want %v, error %v", tt.spec, got, err, tt.want, tt.wantErr)
		}
	}
}
