package pgmsg

import "github.com/pgmsg/pgmsg/pgmsgtype"

// Record is one entry of a topic partition (pgmsgtype.Record). To publish,
// set Topic, Value and optionally Key, Headers and Timestamp; pgmsg fills in
// Partition, Offset and (when zero) Timestamp.
type Record = pgmsgtype.Record
