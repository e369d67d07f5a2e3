package waitqueue

import (
	"errors"
	"time"
)

// The draw's refusals.
var (
	// ErrDrawn: the queue's pre-queue was drawn already.
	ErrDrawn = errors.New("the pre-queue was drawn already")
	// ErrDrawChanged: the list given is not the pre-queue of the entries
	// cursor (someone joined or left since it was read): read it again.
	ErrDrawChanged = errors.New("the pre-queue changed since it was read")
)

// Drawing is what the line recorded of a drop's draw.
type Drawing struct {
	Drawn   bool
	Entries int
	// Cursor is the entries cursor the draw placed the pre-queue of:
	// every pre-queue join up to it, none after.
	Cursor uint64
	Digest string
}

// PreEntry is one shopper in a pre-queue.
type PreEntry struct {
	Seq  uint64
	User string
}

// Invite is an invite code taken by a join, with the expiry it was
// issued with: a join that cannot be recorded gives it back as it was.
type Invite struct {
	Code      string
	ExpiresAt time.Time
}
