package store

import (
	"context"
	"time"

	"github.com/pgmsg/pgmsg/internal/dbsqlc"
	"github.com/pgmsg/pgmsg/internal/errs"
	"github.com/pgmsg/pgmsg/pgmsgtype"
)

// Token is a row of the token table: the public pgmsgtype.Token.
type Token = pgmsgtype.Token

// TokenCreate stores a new token by the hash of its secret; expiresAt nil
// is never. It fails with errs.TokenExists when a live token has the name.
func (s *Store) TokenCreate(ctx context.Context, exec DBTX, name string, hash []byte, prefix string, scopes []string, expiresAt *time.Time) (*Token, error) {
	row, err := s.q.TokenCreate(ctx, s.DB(exec), dbsqlc.TokenCreateParams{Name: name, TokenHash: hash, Prefix: prefix,
		Scopes: scopes, ExpiresAt: timestamptz(expiresAt)})
	if err != nil {
		return nil, errs.Map(err)
	}
	return &Token{ID: row.TokenID, Name: row.Name, Prefix: row.Prefix, Scopes: row.Scopes, CreatedAt: row.CreatedAt.Time,
		ExpiresAt: timePtr(row.ExpiresAt)}, nil
}

// TokenList returns every token, revoked and expired ones included, by id.
func (s *Store) TokenList(ctx context.Context, exec DBTX) ([]*Token, error) {
	rows, err := s.q.TokenList(ctx, s.DB(exec))
	if err != nil {
		return nil, errs.Map(err)
	}
	out := make([]*Token, len(rows))
	for i, r := range rows {
		out[i] = &Token{ID: r.TokenID, Name: r.Name, Prefix: r.Prefix, Scopes: r.Scopes, CreatedAt: r.CreatedAt.Time,
			ExpiresAt: timePtr(r.ExpiresAt), RevokedAt: timePtr(r.RevokedAt), LastUsedAt: timePtr(r.LastUsedAt)}
	}
	return out, nil
}

// TokenRevoke revokes a live token; errs.UnknownToken when none has the id.
func (s *Store) TokenRevoke(ctx context.Context, exec DBTX, id int64) error {
	return errs.Map(s.q.TokenRevoke(ctx, s.DB(exec), id))
}

// TokenVerify returns the live token with the secret's hash, or nil (and
// records its use).
func (s *Store) TokenVerify(ctx context.Context, exec DBTX, hash []byte) (*Token, error) {
	rows, err := s.q.TokenVerify(ctx, s.DB(exec), hash)
	if err != nil || len(rows) == 0 {
		return nil, errs.Map(err)
	}
	r := rows[0]
	return &Token{ID: r.TokenID, Name: r.Name, Prefix: r.Prefix, Scopes: r.Scopes, CreatedAt: r.CreatedAt.Time,
		ExpiresAt: timePtr(r.ExpiresAt), RevokedAt: timePtr(r.RevokedAt), LastUsedAt: timePtr(r.LastUsedAt)}, nil
}
