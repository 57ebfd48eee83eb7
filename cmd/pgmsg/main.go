// Command pgmsg is pgmsg's CLI: migrations, topics, groups, the dev demo.
package main

import (
	"os"

	"github.com/pgmsg/pgmsg/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
