// Package pgmsgtype holds the data types pgmsg's packages share: records,
// claims, read replicas' counters, queues' settings and API tokens.
// Package pgmsg re-exports each of them under the same name (pgmsg.Record
// is pgmsgtype.Record), so applications need not import this package;
// pgmsg's internal packages (the store layer first) use the types from
// here, which is what lets them live below the root package without a copy
// of each struct.
package pgmsgtype
