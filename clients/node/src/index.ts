// pgmsg: a thin Node.js client of pgmsg's SQL API (docs/sql-api.md) on
// node-postgres. Pgmsg makes single calls; Consumer and Worker run the
// consume and work loops.
export * from "./client";
export * from "./errors";
export * from "./loops";
