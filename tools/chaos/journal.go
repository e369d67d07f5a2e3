package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kinds of journal records.
const (
	recJoin       = "join"        // an answer to POST /tickets (or the error instead)
	recReady      = "ready"       // READY seen, by SSE or poll, with its token id
	recLeave      = "leave"       // an answer to DELETE /tickets/{ticket}
	recOrder      = "order"       // an answer to POST /v1/orders
	recOrderFinal = "order_final" // the final status a shopper read for their order
	recFault      = "fault"       // the harness injected its fault
	recHeal       = "heal"        // the harness undid it
	recLoadStop   = "load_stop"   // no more joins from here on
)

// record is one line of the load client's journal: what a shopper was
// told, exactly as it was told. It is one of the independent records the
// checks compare (with the streams, Redis, PostgreSQL and pgsim).
type record struct {
	T        time.Time  `json:"t"`
	Kind     string     `json:"kind"`
	Queue    string     `json:"queue,omitempty"`
	User     string     `json:"user,omitempty"`
	Code     int        `json:"code,omitempty"`
	Ticket   string     `json:"ticket,omitempty"`
	Seq      uint64     `json:"seq,omitempty"`
	Position int64      `json:"position,omitempty"`
	TokenID  string     `json:"tokenId,omitempty"`
	ReadyAt  *time.Time `json:"readyAt,omitempty"`
	Via      string     `json:"via,omitempty"`
	OrderID  string     `json:"orderId,omitempty"`
	Status   string     `json:"status,omitempty"`
	Err      string     `json:"err,omitempty"`
	Detail   string     `json:"detail,omitempty"`
}

// journal is the append-only JSONL log of every answer the load got.
type journal struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

func openJournal(path string) (*journal, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &journal{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

// add appends r, stamped now unless it has a time.
func (j *journal) add(r record) {
	if r.T.IsZero() {
		r.T = time.Now()
	}
	b, _ := json.Marshal(r) // plain fields: cannot fail
	j.mu.Lock()
	defer j.mu.Unlock()
	j.w.Write(b)
	j.w.WriteByte('\n')
}

func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.w.Flush(); err != nil {
		return err
	}
	return j.f.Close()
}

// readJournal reads a journal back: the checks work from the file, not
// from anything the load client holds in memory.
func readJournal(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// ticketSeq reads the place in line out of a ticket —
// t1.<queue>.<user>.<seq>.<mac>, or t2.<queue>.<user>.<epoch>.<seq>.<mac>
// where the epoch names the stream. The checks trust it only as what the
// shopper was told.
func ticketSeq(t string) (uint64, bool) {
	parts := strings.Split(t, ".")
	var s string
	switch {
	case len(parts) == 5 && parts[0] == "t1":
		s = parts[3]
	case len(parts) == 6 && parts[0] == "t2":
		s = parts[4]
	default:
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}
