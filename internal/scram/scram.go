// Package scram is the server side of SASL/SCRAM-SHA-256 and
// SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them, and the stored
// verifiers pgmsg keeps for its tokens.
//
// A verifier is what a server stores instead of the password: a random
// salt, an iteration count, StoredKey = H(ClientKey) and ServerKey, where
// SaltedPassword = PBKDF2(HMAC-H, password, salt, iterations),
// ClientKey = HMAC(SaltedPassword, "Client Key") and
// ServerKey = HMAC(SaltedPassword, "Server Key"). It lets the server check
// a client's proof and prove itself to the client, but cannot be replayed
// as the password. Its text form is PostgreSQL's:
// "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>" (base64).
//
// Passwords are used as they are (no SASLprep): pgmsg's token secrets are
// ASCII ("pgm_" and base64url), which SASLprep leaves unchanged.
package scram

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// The mechanisms, as Kafka's SaslHandshake names them.
const (
	SHA256 = "SCRAM-SHA-256"
	SHA512 = "SCRAM-SHA-512"
)

// Mechanisms are the supported mechanisms, in the order they are advertised.
var Mechanisms = []string{SHA256, SHA512}

// MinIterations is the fewest PBKDF2 iterations a verifier may have (RFC
// 7677's minimum, and Kafka's); Iterations is what NewVerifier uses.
const (
	MinIterations = 4096
	Iterations    = 4096
	// MaxIterations bounds what a stored verifier may ask of a client
	// (Kafka's limit).
	MaxIterations = 16384
	// SaltBytes is the length of NewVerifier's random salts.
	SaltBytes = 16
)

// hashOf returns the hash function of a mechanism, nil if unknown.
func hashOf(mechanism string) func() hash.Hash {
	switch mechanism {
	case SHA256:
		return sha256.New
	case SHA512:
		return sha512.New
	}
	return nil
}

// Verifier is a stored SCRAM credential of one mechanism.
type Verifier struct {
	Mechanism  string
	Salt       []byte
	Iterations int
	StoredKey  []byte
	ServerKey  []byte
}

// NewVerifier returns the verifier of password for mechanism, with a
// random salt and Iterations iterations.
func NewVerifier(mechanism, password string) (*Verifier, error) {
	salt := make([]byte, SaltBytes)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	return verifierWith(mechanism, password, salt, Iterations)
}

func verifierWith(mechanism, password string, salt []byte, iterations int) (*Verifier, error) {
	h := hashOf(mechanism)
	if h == nil {
		return nil, fmt.Errorf("scram: unknown mechanism %q", mechanism)
	}
	salted, err := pbkdf2.Key(h, password, salt, iterations, h().Size())
	if err != nil {
		return nil, err
	}
	clientKey := hmacOf(h, salted, []byte("Client Key"))
	return &Verifier{Mechanism: mechanism, Salt: salt, Iterations: iterations,
		StoredKey: hashBytes(h, clientKey), ServerKey: hmacOf(h, salted, []byte("Server Key"))}, nil
}

// String is the verifier's text form (PostgreSQL's), which token_create
// takes.
func (v *Verifier) String() string {
	e := base64.StdEncoding.EncodeToString
	return v.Mechanism + "$" + strconv.Itoa(v.Iterations) + ":" + e(v.Salt) + "$" + e(v.StoredKey) + ":" + e(v.ServerKey)
}

// ParseVerifier parses String's form.
func ParseVerifier(s string) (*Verifier, error) {
	bad := errors.New("scram: a verifier is MECHANISM$ITERATIONS:SALT$STOREDKEY:SERVERKEY")
	mech, rest, ok := strings.Cut(s, "$")
	h := hashOf(mech)
	if !ok || h == nil {
		return nil, bad
	}
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return nil, bad
	}
	it, salt, ok1 := strings.Cut(params, ":")
	stored, server, ok2 := strings.Cut(keys, ":")
	if !ok1 || !ok2 {
		return nil, bad
	}
	v := &Verifier{Mechanism: mech}
	var err error
	if v.Iterations, err = strconv.Atoi(it); err != nil {
		return nil, bad
	}
	d := base64.StdEncoding.DecodeString
	if v.Salt, err = d(salt); err != nil {
		return nil, bad
	}
	if v.StoredKey, err = d(stored); err != nil {
		return nil, bad
	}
	if v.ServerKey, err = d(server); err != nil {
		return nil, bad
	}
	return v, v.Check()
}

// Check reports whether the verifier is usable: a known mechanism, keys
// of its hash's size, a salt and MinIterations to MaxIterations
// iterations.
func (v *Verifier) Check() error {
	h := hashOf(v.Mechanism)
	switch {
	case h == nil:
		return fmt.Errorf("scram: unknown mechanism %q", v.Mechanism)
	case len(v.StoredKey) != h().Size() || len(v.ServerKey) != h().Size():
		return fmt.Errorf("scram: %s keys are %d bytes", v.Mechanism, h().Size())
	case len(v.Salt) == 0:
		return errors.New("scram: empty salt")
	case v.Iterations < MinIterations || v.Iterations > MaxIterations:
		return fmt.Errorf("scram: iterations must be %d to %d", MinIterations, MaxIterations)
	}
	return nil
}

func hmacOf(h func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(h, key)
	m.Write(msg)
	return m.Sum(nil)
}

func hashBytes(h func() hash.Hash, b []byte) []byte {
	x := h()
	x.Write(b)
	return x.Sum(nil)
}

// ErrMalformed is wrapped by every error about a message's syntax.
var ErrMalformed = errors.New("malformed SCRAM message")

// ErrProof is the error of a client proof that does not match: a wrong
// password.
var ErrProof = errors.New("SCRAM proof does not match: wrong password")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// ClientFirst is a parsed client-first-message.
type ClientFirst struct {
	// User is the username, unescaped ("=2C" is ',', "=3D" is '=').
	User string
	// gs2 is the GS2 header as sent ("n,," or "y,,", with an authzid),
	// which client-final's channel binding must repeat.
	gs2   string
	bare  string
	nonce string
}

// ParseClientFirst parses a client-first-message. It refuses channel
// binding ("p="), which this server does not support (a client saying
// "y", it would have used it had the server advertised it, is accepted:
// the server advertises no -PLUS mechanism), an authzid other than the
// username, the reserved "m=" extension and a missing or invalid nonce.
func ParseClientFirst(msg []byte) (*ClientFirst, error) {
	s := string(msg)
	cb, rest, ok := strings.Cut(s, ",")
	if !ok {
		return nil, malformed("client-first-message must start with a GS2 header (n,,)")
	}
	switch {
	case cb == "n" || cb == "y":
	case strings.HasPrefix(cb, "p="):
		return nil, malformed("channel binding (%s) is not supported: use SCRAM without channel binding (gs2 header n)", truncate(cb, 40))
	default:
		return nil, malformed("bad GS2 channel binding flag %q", truncate(cb, 20))
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, malformed("client-first-message must have a GS2 header (n,,) then attributes")
	}
	var authzid string
	if authz != "" {
		a, found := strings.CutPrefix(authz, "a=")
		if !found {
			return nil, malformed("bad GS2 authzid")
		}
		var err error
		if authzid, err = unescapeName(a); err != nil {
			return nil, err
		}
	}
	attrs := strings.Split(bare, ",")
	if len(attrs) < 2 {
		return nil, malformed("client-first-message-bare must be n=USER,r=NONCE")
	}
	if strings.HasPrefix(attrs[0], "m=") {
		return nil, malformed("the reserved m= extension is not supported")
	}
	u, found := strings.CutPrefix(attrs[0], "n=")
	if !found {
		return nil, malformed("client-first-message-bare must start with n=USER")
	}
	user, err := unescapeName(u)
	if err != nil {
		return nil, err
	}
	if user == "" {
		return nil, malformed("empty username")
	}
	if authzid != "" && authzid != user {
		return nil, malformed("the authzid must be the username or empty")
	}
	nonce, found := strings.CutPrefix(attrs[1], "r=")
	if !found || !validNonce(nonce) {
		return nil, malformed("client-first-message-bare needs a nonce r= of printable characters but ','")
	}
	// Further attributes are extensions (Kafka's tokenauth=true among
	// them), which this server ignores; each must still be a=value.
	for _, x := range attrs[2:] {
		if k, _, ok := strings.Cut(x, "="); !ok || k == "" {
			return nil, malformed("bad extension attribute")
		}
	}
	return &ClientFirst{User: user, gs2: cb + "," + authz + ",", bare: bare, nonce: nonce}, nil
}

// unescapeName decodes a saslname: "=2C" is ',', "=3D" is '=', and no
// other '=' may appear.
func unescapeName(s string) (string, error) {
	if !strings.Contains(s, "=") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", malformed("bad escape in a username (only =2C and =3D)")
		}
		i += 2
	}
	return b.String(), nil
}

func validNonce(n string) bool {
	if n == "" || len(n) > 1024 {
		return false
	}
	for i := 0; i < len(n); i++ {
		if n[i] < 0x21 || n[i] > 0x7e || n[i] == ',' {
			return false
		}
	}
	return true
}

// Conversation is the server's side of one exchange after the
// client-first-message: Start answers it, Finish checks the
// client-final-message.
type Conversation struct {
	first       *ClientFirst
	v           *Verifier
	nonce       string // client nonce + server nonce
	serverFirst string
}

// Start begins the exchange with the client's first message and the
// user's verifier, and returns the server-first-message. The server's
// part of the nonce comes from crypto/rand.
func Start(first *ClientFirst, v *Verifier) (*Conversation, []byte, error) {
	if err := v.Check(); err != nil {
		return nil, nil, err
	}
	var raw [18]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, nil, err
	}
	c := start(first, v, base64.StdEncoding.EncodeToString(raw[:]))
	return c, []byte(c.serverFirst), nil
}

func start(first *ClientFirst, v *Verifier, serverNonce string) *Conversation {
	c := &Conversation{first: first, v: v, nonce: first.nonce + serverNonce}
	c.serverFirst = "r=" + c.nonce + ",s=" + base64.StdEncoding.EncodeToString(v.Salt) + ",i=" + strconv.Itoa(v.Iterations)
	return c
}

// Finish checks the client-final-message (c=, r=, extensions, p=): the
// channel binding must repeat the GS2 header, the nonce must be the
// combined one and the proof must match the verifier, compared in
// constant time. It returns the server-final-message with the
// ServerSignature, or ErrProof or an ErrMalformed error.
func (c *Conversation) Finish(msg []byte) ([]byte, error) {
	s := string(msg)
	withoutProof, proof64, ok := cutLast(s, ",p=")
	if !ok {
		return nil, malformed("client-final-message must end with p=PROOF")
	}
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 {
		return nil, malformed("client-final-message must be c=BINDING,r=NONCE,p=PROOF")
	}
	cbind, found := strings.CutPrefix(attrs[0], "c=")
	if !found {
		return nil, malformed("client-final-message must start with c=")
	}
	gs2, err := base64.StdEncoding.DecodeString(cbind)
	if err != nil || string(gs2) != c.first.gs2 {
		return nil, malformed("the channel binding c= must repeat the GS2 header of the first message (no channel binding is supported)")
	}
	nonce, found := strings.CutPrefix(attrs[1], "r=")
	// The combined nonce, or the client's nonce before it: librdkafka
	// (through 2.0 at least) sends its own nonce again in front of the
	// combined one, and Kafka's brokers accept any client-final nonce
	// that ends with the combined one. pgmsg accepts exactly these two
	// forms; the proof covers the message as sent either way.
	exact := subtle.ConstantTimeCompare([]byte(nonce), []byte(c.nonce))
	doubled := subtle.ConstantTimeCompare([]byte(nonce), []byte(c.first.nonce+c.nonce))
	if !found || exact|doubled != 1 {
		return nil, malformed("the nonce r= is not the one of the server-first-message")
	}
	h := hashOf(c.v.Mechanism)
	proof, err := base64.StdEncoding.DecodeString(proof64)
	if err != nil || len(proof) != h().Size() {
		return nil, malformed("the proof p= must be %d bytes in base64", h().Size())
	}
	authMessage := []byte(c.first.bare + "," + c.serverFirst + "," + withoutProof)
	clientSig := hmacOf(h, c.v.StoredKey, authMessage)
	clientKey := make([]byte, len(proof))
	subtle.XORBytes(clientKey, proof, clientSig)
	if subtle.ConstantTimeCompare(hashBytes(h, clientKey), c.v.StoredKey) != 1 {
		return nil, ErrProof
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacOf(h, c.v.ServerKey, authMessage))), nil
}

// cutLast cuts s around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
