package lineapi

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"usher/internal/jsonenc"
)

// sendPlace writes p as the answer's JSON body with status.
func sendPlace(c *fiber.Ctx, status int, p Place) error {
	b, err := p.appendJSON(make([]byte, 0, 512))
	if err != nil {
		return err
	}
	c.Status(status).Response().SetBodyRaw(b)
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON) // as c.JSON
	return nil
}

// appendJSON appends p as encoding/json writes it — byte for byte
// (TestPlaceJSONSameBytes, FuzzPlaceJSONSameBytes) — without its
// reflection: every join and every poll is answered with a Place (the
// gateway's profile of the poll path, BENCHMARKS.md). A time encoding/json
// refuses (a year outside 0–9999) goes the long way, for its error.
func (p Place) appendJSON(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, `{"ticket":`...)
	b = jsonenc.AppendString(b, p.Ticket)
	b = append(b, `,"queue":`...)
	b = jsonenc.AppendString(b, p.Queue)
	b = append(b, `,"status":`...)
	b = jsonenc.AppendString(b, p.Status)
	if p.Position != 0 {
		b = append(b, `,"position":`...)
		b = strconv.AppendInt(b, p.Position, 10)
	}
	if p.Waiting != nil {
		b = append(b, `,"waiting":`...)
		b = strconv.AppendInt(b, *p.Waiting, 10)
	}
	if p.ETASeconds != nil {
		b = append(b, `,"etaSeconds":`...)
		b = strconv.AppendInt(b, *p.ETASeconds, 10)
	}
	if p.PollAfterMs != 0 {
		b = append(b, `,"pollAfterMs":`...)
		b = strconv.AppendInt(b, p.PollAfterMs, 10)
	}
	b = append(b, `,"events":`...)
	b = jsonenc.AppendString(b, p.Events)
	if p.Token != "" {
		b = append(b, `,"token":`...)
		b = jsonenc.AppendString(b, p.Token)
	}
	ok := true
	if p.ReadyAt != nil {
		b = append(b, `,"readyAt":`...)
		b, ok = appendJSONTime(b, *p.ReadyAt, ok)
	}
	if p.ExpiresAt != nil {
		b = append(b, `,"expiresAt":`...)
		b, ok = appendJSONTime(b, *p.ExpiresAt, ok)
	}
	if p.Reason != "" {
		b = append(b, `,"reason":`...)
		b = jsonenc.AppendString(b, p.Reason)
	}
	if p.Stock != "" {
		b = append(b, `,"stock":`...)
		b = jsonenc.AppendString(b, p.Stock)
	}
	if len(p.SKUs) > 0 {
		b = append(b, `,"skusAvailable":[`...)
		for i, s := range p.SKUs {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.AppendString(b, s)
		}
		b = append(b, ']')
	}
	if p.OpensAt != nil {
		b = append(b, `,"opensAt":`...)
		b, ok = appendJSONTime(b, *p.OpensAt, ok)
	}
	if n := p.Notice; n != nil {
		b = append(b, `,"notice":{"message":`...)
		b = jsonenc.AppendString(b, n.Message)
		b = append(b, `,"level":`...)
		b = jsonenc.AppendString(b, n.Level)
		b = append(b, `,"since":`...)
		b, ok = appendJSONTime(b, n.Since, ok)
		b = append(b, '}')
	}
	if !ok {
		raw, err := json.Marshal(p)
		return append(b[:start], raw...), err
	}
	return append(b, '}'), nil
}

// appendJSONTime appends t as encoding/json does; ok turns false, and
// stays so, for a time it refuses.
func appendJSONTime(b []byte, t time.Time, ok bool) ([]byte, bool) {
	b, err := jsonenc.AppendTime(b, t)
	return b, ok && err == nil
}
