package shopper

import (
	"fmt"
	"path/filepath"
	"strings"

	"usher/internal/config"
	"usher/internal/ticket"
	"usher/internal/token"
)

// KeyFiles name the files of the keys a shopper's view needs besides the
// line: the entry tokens' signing key (and the older keys still verified
// after a rotation) and the tickets' secret. The gateway and the notifier
// both serve the view, so they read them from the same variables, with the
// same defaults under USHER_DATA_DIR.
type KeyFiles struct {
	Signing      string   // USHER_SIGNING_KEY_FILE
	Verify       []string // USHER_VERIFY_KEY_FILES
	TicketSecret string   // USHER_TICKET_SECRET_FILE
}

// LoadKeyFiles reads the key files' variables; data is USHER_DATA_DIR.
func LoadKeyFiles(env *config.Env, data string) KeyFiles {
	return KeyFiles{
		Signing:      env.String("USHER_SIGNING_KEY_FILE", filepath.Join(data, "signing.key")),
		Verify:       env.List("USHER_VERIFY_KEY_FILES", ""),
		TicketSecret: env.String("USHER_TICKET_SECRET_FILE", filepath.Join(data, "ticket.secret")),
	}
}

// Open loads the signing keys and loads or creates the ticket secret. The
// files' errors name the file; an error here names the variable too, which
// is what the operator sets.
func (f KeyFiles) Open() (*token.Keyring, *ticket.Signer, error) {
	keys, err := token.LoadKeyring(f.Signing, f.Verify)
	if err != nil {
		return nil, nil, fmt.Errorf("USHER_SIGNING_KEY_FILE=%s, USHER_VERIFY_KEY_FILES=%s: %w", f.Signing, strings.Join(f.Verify, ","), err)
	}
	tickets, err := ticket.LoadOrCreateSigner(f.TicketSecret)
	if err != nil {
		return nil, nil, fmt.Errorf("USHER_TICKET_SECRET_FILE=%s: %w", f.TicketSecret, err)
	}
	return keys, tickets, nil
}
