// The test database: PGMSG_TEST_DATABASE_URL and PGMSG_TEST_SCHEMA, a
// migrated schema of the test's own. `go test ./clients` (which `make ci`
// runs) sets both and drops the schema afterwards.
import { randomUUID } from "node:crypto";
import { Pool } from "pg";

export const URL = process.env.PGMSG_TEST_DATABASE_URL ?? "";
export const SCHEMA = process.env.PGMSG_TEST_SCHEMA ?? "";
if (!URL || !SCHEMA) {
  console.error("pgmsg tests: PGMSG_TEST_DATABASE_URL and PGMSG_TEST_SCHEMA (a migrated schema) must be set; run them with `go test ./clients -run TestClients/NodeSuite`");
  process.exit(2);
}

/** A topic, group or queue name no other test uses. */
export function name(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 10)}`;
}

/** A pool whose connections carry application_name tag, so a test can find
 * a loop's listener in pg_stat_activity. */
export function pool(tag = "pgmsg-node-test"): Pool {
  return new Pool({ connectionString: URL, application_name: tag, max: 4 });
}

/** Runs text with {s} replaced by the quoted schema (test SQL only). */
export async function sql(p: Pool, text: string, args: unknown[] = []): Promise<any[]> {
  return (await p.query(text.replace(/\{s\}/g, '"' + SCHEMA + '"'), args)).rows;
}

/** Polls pred until true. The timeout only bounds a broken run; no
 * assertion depends on how fast the machine is. */
export async function waitUntil(pred: () => Promise<boolean>, what: string, timeoutMs = 60000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Whether a connection tagged tag waits in LISTEN. */
export async function listening(p: Pool, tag: string): Promise<boolean> {
  const rows = await p.query(
    "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %' AND state = 'idle'",
    [tag],
  );
  return rows.rows.length > 0;
}
