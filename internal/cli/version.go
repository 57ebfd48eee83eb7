package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

// Version and Commit are set by release builds (make release) with
// -ldflags "-X github.com/pgmsg/pgmsg/internal/cli.Version=v1.2.3 -X
// github.com/pgmsg/pgmsg/internal/cli.Commit=abc1234". Other builds take
// them from the build information Go records (buildVersion).
var (
	Version = ""
	Commit  = ""
)

// buildVersion returns the version and commit of this binary: the
// -ldflags values, else what Go recorded: the module version for `go
// install github.com/pgmsg/pgmsg/cmd/pgmsg@v1.2.3`, the VCS revision for a
// build in a checkout ("+dirty" with uncommitted changes), "devel" and
// "unknown" when neither is known (go run, go test).
func buildVersion() (version, commit string) {
	version, commit = Version, Commit
	info, ok := debug.ReadBuildInfo()
	if ok {
		if version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			version = info.Main.Version
		}
		if commit == "" {
			var rev string
			dirty := false
			for _, s := range info.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if rev != "" && dirty {
				rev += "+dirty"
			}
			commit = rev
		}
	}
	if version == "" {
		version = "devel"
	}
	if commit == "" {
		commit = "unknown"
	}
	return version, commit
}

// versionLine is what `pgmsg version` and `pgmsg --version` print.
func versionLine() string {
	v, c := buildVersion()
	return fmt.Sprintf("pgmsg %s (commit %s, schema version %d, %s %s/%s)",
		v, c, pgmsgmigrate.Latest(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersion(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print pgmsg's version, commit and schema version",
		Long: `Print the version and commit this binary was built from, the schema version
its migrations bring a database to (pgmsg migrate status shows a database's),
and the Go version and platform. Release builds (make release) carry the
version and commit they were built from; go install and go build take them
from the module version and the checkout.`,
		Example: "  pgmsg version\n  pgmsg version -o json\n  pgmsg --version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			if js {
				v, c := buildVersion()
				return g.printJSON(map[string]any{"version": v, "commit": c, "schema_version": pgmsgmigrate.Latest(),
					"go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH})
			}
			fmt.Fprintln(g.stdout, versionLine())
			return nil
		},
	}
}
