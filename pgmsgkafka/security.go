package pgmsgkafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/pgmsg/pgmsg"
)

// TLSConfig is how a client speaks TLS to the brokers, as managed Kafka
// services require (Confluent Cloud, Amazon MSK, Aiven). The zero value
// (with Enabled set) verifies the brokers' certificates against the
// system's roots and sends no client certificate.
type TLSConfig struct {
	// Enabled turns TLS on. It is implied by any other field being set.
	Enabled bool
	// CAFile is a PEM file of the certificate authorities that sign the
	// brokers' certificates (Aiven's ca.pem). Default: the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// brokers that authenticate clients by certificate (mutual TLS: Aiven's
	// service.cert and service.key, MSK's TLS client authentication). Both
	// or neither.
	CertFile, KeyFile string
	// ServerName is the name the brokers' certificates are checked
	// against. Default: the host of each broker's address.
	ServerName string
	// InsecureSkipVerify accepts any certificate a broker presents (no
	// protection against a man in the middle): for tests only. Default
	// false.
	InsecureSkipVerify bool
}

func (c *TLSConfig) enabled() bool {
	return c != nil && (c.Enabled || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" ||
		c.ServerName != "" || c.InsecureSkipVerify)
}

// Config returns the crypto/tls configuration, or nil when TLS is off.
// The files are read now: a missing or unreadable one is an error here,
// not at the first dial.
func (c *TLSConfig) Config() (*tls.Config, error) {
	if !c.enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // off by default; the field says it is for tests
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, invalid("TLS CA file: %v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, invalid("TLS CA file %s holds no PEM certificate", c.CAFile)
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, invalid("TLS client certificate and key go together: both files or neither (cert %q, key %q)", c.CertFile, c.KeyFile)
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, invalid("TLS client certificate: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// The SASL mechanisms of SASLConfig.Mechanism.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
	SASLOAuthBearer = "OAUTHBEARER"
)

// SASLConfig is how a client authenticates to the brokers. Over a
// connection without TLS the credentials of PLAIN and the OAUTHBEARER token
// travel in the clear: managed services require TLS with SASL.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER
	// (case-insensitive). Empty: no SASL.
	Mechanism string
	// User and Password are the credentials of PLAIN and SCRAM (Confluent
	// Cloud's API key and secret are PLAIN's user and password).
	User, Password string
	// Token is OAUTHBEARER's token, used for every connection.
	Token string
	// TokenFile is a file holding OAUTHBEARER's token, read again for
	// every connection and re-authentication, so that a process that
	// renews the token (a sidecar, a cron job) can rewrite the file while
	// the client runs. Token or TokenFile, not both.
	TokenFile string
}

// SASLMechanism returns the sasl mechanism, or nil when Mechanism is empty.
// The checks (a known mechanism, its credentials given, a readable token
// file) run now.
func (c *SASLConfig) SASLMechanism() (sasl.Mechanism, error) {
	if c == nil || c.Mechanism == "" {
		if c != nil && (c.User != "" || c.Password != "" || c.Token != "" || c.TokenFile != "") {
			return nil, invalid("SASL credentials given without a SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)")
		}
		return nil, nil
	}
	switch m := strings.ToUpper(c.Mechanism); m {
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.User == "" || c.Password == "" {
			return nil, invalid("SASL %s needs a user and a password", m)
		}
		if c.Token != "" || c.TokenFile != "" {
			return nil, invalid("SASL %s takes a user and a password, not a token", m)
		}
		switch m {
		case SASLPlain:
			return plain.Auth{User: c.User, Pass: c.Password}.AsMechanism(), nil
		case SASLScramSHA256:
			return scram.Auth{User: c.User, Pass: c.Password}.AsSha256Mechanism(), nil
		default:
			return scram.Auth{User: c.User, Pass: c.Password}.AsSha512Mechanism(), nil
		}
	case SASLOAuthBearer:
		if c.User != "" || c.Password != "" {
			return nil, invalid("SASL OAUTHBEARER takes a token, not a user and a password")
		}
		switch {
		case c.Token != "" && c.TokenFile != "":
			return nil, invalid("SASL OAUTHBEARER: a token or a token file, not both")
		case c.Token != "":
			return oauth.Auth{Token: c.Token}.AsMechanism(), nil
		case c.TokenFile != "":
			file := c.TokenFile
			if _, err := readToken(file); err != nil {
				return nil, err
			}
			return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
				tok, err := readToken(file)
				return oauth.Auth{Token: tok}, err
			}), nil
		default:
			return nil, invalid("SASL OAUTHBEARER needs a token or a token file")
		}
	default:
		return nil, invalid("SASL mechanism %q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER", c.Mechanism)
	}
}

// readToken reads an OAUTHBEARER token from file: its content without
// surrounding white space.
func readToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", invalid("SASL OAUTHBEARER token file: %v", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", invalid("SASL OAUTHBEARER token file %s is empty", file)
	}
	return tok, nil
}

// SecurityOpts returns the kgo options of tlsCfg and saslCfg (either may
// be nil): a TLS dialer and a SASL mechanism. An error, whose code is
// pgmsg's ErrInvalidArgument, names what is wrong before anything dials.
func SecurityOpts(tlsCfg *TLSConfig, saslCfg *SASLConfig) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tc, err := tlsCfg.Config()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	m, err := saslCfg.SASLMechanism()
	if err != nil {
		return nil, err
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func invalid(format string, args ...any) error {
	return pgmsg.NewError(pgmsg.ErrInvalidArgument, nil, "pgmsgkafka: %s", fmt.Sprintf(format, args...))
}
