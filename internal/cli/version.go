package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

func newVersion(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print pgmsg's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(map[string]any{"version": Version, "schema_version": pgmsgmigrate.Latest(), "go": runtime.Version()})
			}
			fmt.Fprintf(g.stdout, "pgmsg %s (schema version %d, %s)\n", Version, pgmsgmigrate.Latest(), runtime.Version())
			return nil
		},
	}
}
