package pgmsg_test

import (
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// Kafka's own test vectors for murmur2 (Kafka UtilsTest.testMurmur2), in Go
// and in the SQL API.
func TestMurmur2MatchesKafka(t *testing.T) {
	t.Parallel()
	vectors := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	tb := setup(t, nil)
	fn := pgx.Identifier{tb.Schema, "murmur2"}.Sanitize()
	for in, want := range vectors {
		require.Equal(t, want, pgmsg.Murmur2([]byte(in)), "Go murmur2(%q)", in)
		var got int32
		require.NoError(t, tb.Pool.QueryRow(tb.ctx, "SELECT "+fn+"($1::bytea)", []byte(in)).Scan(&got))
		require.Equal(t, want, got, "SQL murmur2(%q)", in)
	}
	// Go and SQL partition random keys identically.
	pfk := pgx.Identifier{tb.Schema, "partition_for_key"}.Sanitize()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		key := make([]byte, rng.IntN(40))
		for j := range key {
			key[j] = byte(rng.IntN(256))
		}
		parts := 1 + rng.IntN(64)
		var got int32
		require.NoError(t, tb.Pool.QueryRow(tb.ctx, "SELECT "+pfk+"($1::bytea, $2)", key, parts).Scan(&got))
		require.Equal(t, pgmsg.PartitionForKey(key, parts), got, "key %x over %d partitions", key, parts)
	}
}
