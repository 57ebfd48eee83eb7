package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// as PEM files in dir and returns their paths and the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "pgmsg test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err = x509.ParseCertificate(der)
	require.NoError(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile, cert
}

// TestServeTLS runs serve with --tls-cert and --tls-key: a client that
// trusts the certificate gets /healthz and an authenticated request over
// HTTPS (TLS 1.2 at least, HTTP/2 offered); plain HTTP is refused.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	out := s.ok("", "token", "create", "admin", "--scope", "admin", "-o", "json")
	secret := secretRE.FindString(out)
	require.NotEmpty(t, secret, out)
	certFile, keyFile, cert := selfSigned(t, t.TempDir())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr strings.Builder
	g := &globals{databaseURL: s.b.URL, schema: s.b.Schema, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, output: "table"}
	addrc := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- g.serve(ctx, serveOpts{listen: "127.0.0.1:0", maxConns: 4, tlsCert: certFile, tlsKey: keyFile,
			authBurst: 10, ready: func(a string) { addrc <- a }})
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}

	roots := x509.NewCertPool()
	roots.AddCert(cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	// get answers the response with its body read and closed.
	type answer struct {
		StatusCode int
		TLS        *tls.ConnectionState
		Proto      string
	}
	get := func(c *http.Client, url, token string) (answer, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := c.Do(req)
		if err != nil {
			return answer{}, err
		}
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, res.Body)
		return answer{res.StatusCode, res.TLS, res.Proto}, nil
	}
	res, err := get(client, "https://"+addr+"/healthz", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotNil(t, res.TLS)
	require.GreaterOrEqual(t, res.TLS.Version, uint16(tls.VersionTLS12))
	require.Equal(t, "HTTP/2.0", res.Proto)
	res, err = get(client, "https://"+addr+"/v1/topics", secret)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)

	// A client that does not trust the certificate, or that only speaks
	// TLS 1.1, fails the handshake.
	plainTr := &http.Transport{}
	defer plainTr.CloseIdleConnections()
	_, err = get(&http.Client{Transport: plainTr}, "https://"+addr+"/healthz", "")
	require.Error(t, err)
	oldTr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MaxVersion: tls.VersionTLS11}}
	defer oldTr.CloseIdleConnections()
	_, err = get(&http.Client{Transport: oldTr}, "https://"+addr+"/healthz", "")
	require.Error(t, err)

	// Plain HTTP gets no API answer: Go's TLS server says 400 "Client sent
	// an HTTP request to an HTTPS server" and closes.
	res, err = get(&http.Client{Transport: plainTr}, "http://"+addr+"/healthz", "")
	if err == nil {
		require.Equal(t, http.StatusBadRequest, res.StatusCode)
	}

	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	require.Contains(t, stdout.String(), "pgmsg serving HTTPS on https://127.0.0.1:")
}

// --metrics-addr serves /metrics on a listener of its
// own (a loopback address only the scraper reaches, say), and the API's
// listener then answers /metrics 404.
func TestServeMetricsAddr(t *testing.T) {
	t.Parallel()
	s := newSession(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr strings.Builder
	g := &globals{databaseURL: s.b.URL, schema: s.b.Schema, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, output: "table"}
	addrc, metricsc := make(chan string, 1), make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- g.serve(ctx, serveOpts{listen: "127.0.0.1:0", metricsAddr: "127.0.0.1:0", maxConns: 4, authBurst: 10,
			ready: func(a string) { addrc <- a }, metricsReady: func(a string) { metricsc <- a }})
	}()
	var addr, maddr string
	for addr == "" || maddr == "" {
		select {
		case addr = <-addrc:
		case maddr = <-metricsc:
		case err := <-served:
			t.Fatalf("serve: %v", err)
		}
	}
	require.NotEqual(t, addr, maddr)

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	get := func(url string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		res, err := client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	status, body := get("http://" + maddr + "/metrics")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, "pgmsg_")
	status, body = get("http://" + addr + "/metrics")
	require.Equal(t, http.StatusNotFound, status, "the API's listener must not serve /metrics: %s", body)
	status, _ = get("http://" + addr + "/healthz")
	require.Equal(t, http.StatusOK, status)
	status, _ = get("http://" + maddr + "/healthz")
	require.Equal(t, http.StatusNotFound, status, "the metrics listener serves /metrics only")
	status, _ = get("http://" + maddr + "/v1/topics")
	require.Equal(t, http.StatusNotFound, status)

	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	require.Contains(t, stdout.String(), "pgmsg serving /metrics on http://"+maddr+" only")
}

// TestServeFlagErrors: TLS and rate-limit flags are checked before serve
// connects to the database, with a message that names the flag.
func TestServeFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate"), 0o600))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", certFile}, "--tls-cert needs --tls-key (both or neither)"},
		{[]string{"--tls-key", keyFile}, "--tls-key needs --tls-cert (both or neither)"},
		{[]string{"--tls-cert", filepath.Join(dir, "missing.crt"), "--tls-key", keyFile}, "cannot load --tls-cert"},
		{[]string{"--tls-cert", garbage, "--tls-key", keyFile}, "cannot load --tls-cert"},
		{[]string{"--tls-cert", keyFile, "--tls-key", certFile}, "cannot load --tls-cert"},
		{[]string{"--tls-cert", certFile, "--tls-key", keyFile, "--insecure-no-auth", "--listen", "0.0.0.0:0"}, "--insecure-no-auth is refused on 0.0.0.0:0"},
		{[]string{"--auth-failure-burst", "-1"}, "--auth-failure-burst must not be negative"},
		{[]string{"--auth-failure-rate", "-1"}, "--auth-failure-rate must be a positive number"},
		{[]string{"--auth-failure-rate", "NaN"}, "--auth-failure-rate must be a positive number"},
	} {
		var stdout, stderr strings.Builder
		// Nothing listens on port 1: reaching the database would fail
		// with another message.
		args := append([]string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "serve"}, tc.args...)
		code := Main(args, strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, 1, code, tc.args)
		require.Contains(t, stderr.String(), tc.want, tc.args)
	}
}
