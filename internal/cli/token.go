package cli

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmsg/pgmsg"
)

func newToken(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke API tokens of the HTTP server",
		Long: `The HTTP server (pgmsg serve) admits requests with a bearer token. Tokens are
stored hashed: the secret is printed once, at creation. Each token has scopes:

  publish:PATTERN   publish to matching topics
  consume:PATTERN   consume from (and commit on) matching topics, any group
  consume:PATTERN/group:GROUPS
                    the same, as the matching consumer groups only
  enqueue:PATTERN   enqueue into matching queues
  claim:PATTERN     claim and complete jobs of matching queues
  read              every read of the admin API (topics, groups, queues, jobs):
                    the dashboard's viewers, monitoring; changes nothing
  admin             everything, including topics, groups, queues admin

In PATTERN, * matches any run of characters: orders.*, *, emails.`,
	}
	var scopes []string
	var expiresIn time.Duration
	create := &cobra.Command{
		Use:   "create [NAME] --scope SCOPE...",
		Short: "Create a token and print its secret (shown only this once)",
		Example: `  pgmsg token create billing-svc --scope consume:orders --scope 'publish:invoices.*'
  pgmsg token create ops --scope admin --expires-in 720h
  TOKEN=$(pgmsg token create ci --scope 'publish:*' -o json | jq -r .token)`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(scopes) == 0 {
				return fmt.Errorf("--scope is required (repeatable): admin, read, publish:PATTERN, consume:PATTERN[/group:PATTERN], enqueue:PATTERN or claim:PATTERN")
			}
			if expiresIn < 0 {
				return fmt.Errorf("--expires-in must not be negative, got %s", expiresIn)
			}
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			} else {
				var b [3]byte
				_, _ = rand.Read(b[:])
				name = "token-" + hex.EncodeToString(b[:])
			}
			var all []string
			for _, s := range scopes {
				for _, p := range strings.Split(s, ",") {
					if p = strings.TrimSpace(p); p != "" {
						all = append(all, p)
					}
				}
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			opts := &pgmsg.CreateTokenOpts{}
			if expiresIn > 0 {
				opts.ExpiresAt = time.Now().Add(expiresIn)
			}
			secret, tok, err := c.CreateToken(cmd.Context(), name, all, opts)
			if err != nil {
				return err
			}
			if js {
				return g.printJSON(struct {
					Secret string `json:"token"`
					*pgmsg.Token
				}{secret, tok})
			}
			fmt.Fprintf(g.stdout, "created token %q (id %d) with scopes %s\n", tok.Name, tok.ID, strings.Join(tok.Scopes, " "))
			if tok.ExpiresAt != nil {
				fmt.Fprintf(g.stdout, "expires at %s\n", tok.ExpiresAt.UTC().Format(time.RFC3339))
			}
			fmt.Fprintf(g.stdout, "\n  %s\n\nthis secret is not stored and will not be shown again; send it as\nAuthorization: Bearer <token>\n", secret)
			return nil
		},
	}
	create.Flags().StringArrayVarP(&scopes, "scope", "s", nil, "scope (repeatable, or comma-separated)")
	create.Flags().DurationVar(&expiresIn, "expires-in", 0, "validity, e.g. 720h (default: no expiry)")
	cmd.AddCommand(create)

	cmd.AddCommand(&cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List tokens (never their secrets)",
		Example: "  pgmsg token list",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			ts, err := c.ListTokens(cmd.Context())
			if err != nil {
				return err
			}
			if js {
				if ts == nil {
					ts = []*pgmsg.Token{}
				}
				return g.printJSON(ts)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tNAME\tPREFIX\tSCOPES\tSTATUS\tCREATED\tLAST USED")
			now := time.Now()
			for _, t := range ts {
				status := "active"
				switch {
				case t.RevokedAt != nil:
					status = "revoked"
				case t.ExpiresAt != nil && t.ExpiresAt.Before(now):
					status = "expired"
				case t.ExpiresAt != nil:
					status = "expires " + t.ExpiresAt.UTC().Format("2006-01-02")
				}
				fmt.Fprintf(w, "%d\t%s\t%s...\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Prefix, strings.Join(t.Scopes, ","), status,
					t.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"), fmtTime(t.LastUsedAt))
			}
			return w.Flush()
		},
	})

	cmd.AddCommand(&cobra.Command{
		Use:   "revoke ID|NAME",
		Short: "Revoke a token: requests with it are refused from now on",
		Example: `  pgmsg token revoke 3
  pgmsg token revoke billing-svc`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, err := g.jsonOutput()
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			id, err := strconv.ParseInt(args[0], 10, 64)
			name := args[0]
			if err != nil {
				ts, err := c.ListTokens(cmd.Context())
				if err != nil {
					return err
				}
				id = -1
				for _, t := range ts {
					if t.Name == args[0] && t.RevokedAt == nil {
						id = t.ID
					}
				}
				if id < 0 {
					return fmt.Errorf("no live token named %q (see pgmsg token list)", args[0])
				}
			}
			if err := c.RevokeToken(cmd.Context(), id); err != nil {
				return err
			}
			if js {
				return g.printJSON(map[string]any{"revoked": id})
			}
			fmt.Fprintf(g.stdout, "revoked token %s (id %d)\n", name, id)
			return nil
		},
	})
	return cmd
}
