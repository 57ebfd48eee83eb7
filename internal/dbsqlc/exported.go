package dbsqlc

// RecordPublishSQL is the RecordPublish query, for pipelining several
// publishes in one pgx.Batch.
const RecordPublishSQL = recordPublish
