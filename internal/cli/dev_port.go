package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/pgmsg/pgmsg/internal/pgcluster"
)

// devPortFile, in the dev data directory, keeps the port of the local
// PostgreSQL, so that the DATABASE_URL pgmsg dev printed stays valid when
// it starts again.
const devPortFile = "pgmsg-port"

// devPort is the port for the dev cluster: the --port flag when given,
// else the one kept in dataDir from the last run, else 0 (a free port).
// A kept port that another program took meanwhile is given up, with a
// warning on warn.
func devPort(flag int, dataDir string, warn io.Writer) int {
	if flag != 0 {
		return flag
	}
	b, err := os.ReadFile(filepath.Join(dataDir, devPortFile))
	if err != nil {
		return 0
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || p < 1024 || p > 65535 {
		return 0
	}
	if checkPortFree(net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), "--port") != nil {
		fmt.Fprintf(warn, "pgmsg: warning: port %d, kept from the last run, is taken: using a free one (export the new DATABASE_URL)\n", p)
		return 0
	}
	return p
}

// keepDevPort records port in dataDir for the next run.
func keepDevPort(dataDir string, port int) error {
	return os.WriteFile(filepath.Join(dataDir, devPortFile), []byte(strconv.Itoa(port)+"\n"), 0o600)
}

// checkPortFree fails, naming the flag that changes it, when addr
// (host:port) is taken: checked before the demo, so that pgmsg dev never
// prints a URL that another program answers.
func checkPortFree(addr, flag string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		var hint string
		if errors.Is(err, syscall.EADDRINUSE) {
			hint = "another program listens there"
		} else {
			hint = oneLine(err)
		}
		example := "127.0.0.1:9090"
		if flag == "--kafka-listen" {
			example = `127.0.0.1:9094 (or --kafka-listen "" for no Kafka listener)`
		}
		return fmt.Errorf("cannot listen on %s (%s): choose another address with %s, e.g. %s %s", addr, hint, flag, flag, example)
	}
	return l.Close()
}

// devURL is the URL pgmsg dev prints for its local cluster in dataDir,
// from the port and password kept there (for --print-url).
func devURL(dataDir string) (string, error) {
	port := devPort(0, dataDir, io.Discard)
	pw, err := os.ReadFile(filepath.Join(dataDir, pgcluster.PasswordFile))
	if port == 0 || err != nil {
		return "", fmt.Errorf("no local PostgreSQL in %s yet: run pgmsg dev first (or pass its --data-dir)", dataDir)
	}
	return pgcluster.URL(port, strings.TrimSpace(string(pw))), nil
}
