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

// TokenCreate stores a new token by the hash of its secret and its SCRAM
// verifiers (text form, scram.Verifier.String); expiresAt nil is never.
// It fails with errs.TokenExists when a live token has the name.
func (s *Store) TokenCreate(ctx context.Context, exec DBTX, name string, hash []byte, prefix string, scopes []string, expiresAt *time.Time, scram []string) (*Token, error) {
	if scram == nil {
		scram = []string{}
	}
	row, err := s.q.TokenCreate(ctx, s.DB(exec), dbsqlc.TokenCreateParams{Name: name, TokenHash: hash, Prefix: prefix,
		Scopes: scopes, ExpiresAt: timestamptz(expiresAt), Scram: scram})
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

// TokenSCRAM is a token's stored SCRAM verifier of one mechanism.
type TokenSCRAM struct {
	Salt       []byte
	Iterations int
	StoredKey  []byte
	ServerKey  []byte
}

// TokenScram returns the live token named name and its SCRAM verifier of
// mechanism (nil when it has none: created without verifiers), or a
// nil token when no live token has the name. Only a role that may read
// the token tables (admin) may call it.
func (s *Store) TokenScram(ctx context.Context, exec DBTX, name, mechanism string) (*Token, *TokenSCRAM, error) {
	rows, err := s.q.TokenScram(ctx, s.DB(exec), dbsqlc.TokenScramParams{Name: name, Mechanism: mechanism})
	if err != nil || len(rows) == 0 {
		return nil, nil, errs.Map(err)
	}
	r := rows[0]
	tok := &Token{ID: r.TokenID, Name: r.Name, Prefix: r.Prefix, Scopes: r.Scopes, CreatedAt: r.CreatedAt.Time,
		ExpiresAt: timePtr(r.ExpiresAt), RevokedAt: timePtr(r.RevokedAt), LastUsedAt: timePtr(r.LastUsedAt)}
	if r.Salt == nil {
		return tok, nil, nil
	}
	return tok, &TokenSCRAM{Salt: r.Salt, Iterations: int(r.Iterations), StoredKey: r.StoredKey, ServerKey: r.ServerKey}, nil
}

// TokenVerifyID returns the live token with the id, or nil (and records
// its use).
func (s *Store) TokenVerifyID(ctx context.Context, exec DBTX, id int64) (*Token, error) {
	rows, err := s.q.TokenVerifyID(ctx, s.DB(exec), id)
	if err != nil || len(rows) == 0 {
		return nil, errs.Map(err)
	}
	r := rows[0]
	return &Token{ID: r.TokenID, Name: r.Name, Prefix: r.Prefix, Scopes: r.Scopes, CreatedAt: r.CreatedAt.Time,
		ExpiresAt: timePtr(r.ExpiresAt), RevokedAt: timePtr(r.RevokedAt), LastUsedAt: timePtr(r.LastUsedAt)}, nil
}
