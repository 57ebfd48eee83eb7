package scram

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"
)

// The exchange of RFC 7677 section 3 (user "user", password "pencil"),
// with its salt and server nonce: the verifier and both signatures are
// the RFC's.
func TestRFC7677Vector(t *testing.T) {
	salt, err := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	require.NoError(t, err)
	v, err := verifierWith(SHA256, "pencil", salt, 4096)
	require.NoError(t, err)
	first, err := ParseClientFirst([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
	require.NoError(t, err)
	require.Equal(t, "user", first.User)
	c := start(first, v, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
	require.Equal(t, "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", c.serverFirst)
	final, err := c.Finish([]byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	require.NoError(t, err)
	require.Equal(t, "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", string(final))

	// One bit of the proof changed: refused as a wrong password.
	_, err = c.Finish([]byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVU="))
	require.ErrorIs(t, err, ErrProof)
}

// librdkafka's client-final nonce is its own nonce followed by the
// combined one; Kafka's brokers accept it, and so does pgmsg. Any other
// nonce, including another prefix of the combined one, is refused before
// the proof is looked at.
func TestClientFinalNonceForms(t *testing.T) {
	v, err := NewVerifier(SHA256, "pencil")
	require.NoError(t, err)
	first, err := ParseClientFirst([]byte("n,,n=user,r=cnonce"))
	require.NoError(t, err)
	c := start(first, v, "snonce")
	for _, nonce := range []string{"cnoncesnonce", "cnoncecnoncesnonce"} {
		_, err := c.Finish([]byte("c=biws,r=" + nonce + ",p=" + base64.StdEncoding.EncodeToString(make([]byte, 32))))
		require.ErrorIs(t, err, ErrProof, "nonce %q reaches the proof check", nonce)
	}
	for _, nonce := range []string{"xcnoncesnonce", "cnonce", "snonce", "cnoncesnoncex", "cnoncecnoncecnoncesnonce"} {
		_, err := c.Finish([]byte("c=biws,r=" + nonce + ",p=" + base64.StdEncoding.EncodeToString(make([]byte, 32))))
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrProof, "nonce %q is refused as malformed", nonce)
	}
}
