package page

import "testing"

// How the page without JavaScript tells each ending, as page.js does.
func TestPageEndings(t *testing.T) {
	en := shippedLangs().ByCode("en")
	tests := []struct {
		status, reason, title, text string
		rejoin                      bool
	}{
		{"EXPIRED", "", "Your turn has passed", "The time to order ran out. You can join the line again.", true},
		{"USED", "", "Order placed", "This place in line has been used for an order.", false},
		{"LEFT", "", "You left the line", "You can join it again whenever you like.", true},
		{"LEFT", "abandoned", "You left the line", "Your place was given up because nobody checked on it for a while. You can join the line again.", true},
		{"CLOSED", "sold_out", "The line is closed", "Sold out: everything has been sold.", false},
		{"CLOSED", "ended", "The line is closed", "This sale has ended.", false},
		{"CLOSED", "closed", "The line is closed", "This sale is not taking more shoppers.", false},
		{"MAINTENANCE", "", "The waiting room is closed for maintenance", "Nothing is lost: please try again in a minute.", true},
	}
	for _, tt := range tests {
		d := endedAs(pageData{L: en}, tt.status, tt.reason)
		if d.Section != "ended" || d.EndTitle != tt.title || d.EndText != tt.text || d.Rejoin != tt.rejoin {
			t.Errorf("%s %s: %q / %q / rejoin %v", tt.status, tt.reason, d.EndTitle, d.EndText, d.Rejoin)
		}
	}
}
