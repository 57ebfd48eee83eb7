// Package testtls makes a throwaway certificate authority and the server
// and client certificates it signs, for tests of TLS connections (the
// Kafka listener, pgmsg mirror and pgmsgkafka against a broker with TLS).
// Keys are ECDSA P-256; everything lives in the test's temporary directory.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are the files and configurations of one authority.
type Certs struct {
	// CAFile is the authority's certificate (PEM).
	CAFile string
	// ServerCertFile and ServerKeyFile are the server's certificate, valid
	// for the hosts given to New, and its key.
	ServerCertFile, ServerKeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate (common
	// name "pgmsg-test-client") and its key.
	ClientCertFile, ClientKeyFile string

	pool       *x509.CertPool
	serverCert tls.Certificate
}

// New makes an authority, a server certificate for hosts (DNS names or IP
// addresses; default "localhost" and 127.0.0.1) and a client certificate.
func New(tb testing.TB, hosts ...string) *Certs {
	tb.Helper()
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1"}
	}
	dir := tb.TempDir()
	caKey := newKey(tb)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pgmsg test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	c := &Certs{CAFile: filepath.Join(dir, "ca.pem"), pool: x509.NewCertPool()}
	c.pool.AddCert(ca)
	writePEM(tb, c.CAFile, "CERTIFICATE", caDER)

	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, hosts []string, name string) (string, string) {
		key := newKey(tb)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			tb.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			tb.Fatal(err)
		}
		certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(tb, certFile, "CERTIFICATE", der)
		writePEM(tb, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	c.ServerCertFile, c.ServerKeyFile = leaf(2, hosts[0], x509.ExtKeyUsageServerAuth, hosts, "server")
	c.ClientCertFile, c.ClientKeyFile = leaf(3, "pgmsg-test-client", x509.ExtKeyUsageClientAuth, nil, "client")
	c.serverCert, err = tls.LoadX509KeyPair(c.ServerCertFile, c.ServerKeyFile)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// Server returns a server configuration with the server certificate; with
// requireClientCert, clients must present a certificate the authority
// signed (mutual TLS).
func (c *Certs) Server(requireClientCert bool) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{c.serverCert}}
	if requireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = c.pool
	}
	return cfg
}

// Client returns a client configuration that trusts the authority and
// presents the client certificate.
func (c *Certs) Client(tb testing.TB) *tls.Config {
	tb.Helper()
	cert, err := tls.LoadX509KeyPair(c.ClientCertFile, c.ClientKeyFile)
	if err != nil {
		tb.Fatal(err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.pool, Certificates: []tls.Certificate{cert}}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
