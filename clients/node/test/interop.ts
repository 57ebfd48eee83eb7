// The Node side of the interop tests in clients/clients_test.go, which runs
// it as a subprocess and checks what it prints (JSON, one object a line).
//
//   node dist/test/interop.js consume URL SCHEMA TOPIC GROUP LIMIT
//   node dist/test/interop.js wait URL SCHEMA TOPIC GROUP LIMIT
//   node dist/test/interop.js enqueue URL SCHEMA QUEUE COUNT
// (as clients/python/tests/interop.py; kind "node").
import { Pool } from "pg";
import { Consumer, Pgmsg } from "../src";

async function main(): Promise<void> {
  const [cmd, url, schema, name, arg, arg2] = process.argv.slice(2);
  const pool = new Pool({ connectionString: url, max: 2 });
  try {
    if (cmd === "consume") {
      const limit = Number(arg2);
      const out: object[] = [];
      const cons = new Consumer(pool, name, arg, { schema, maxRecords: 4, listen: false });
      while (out.length < limit) {
        const got = await cons.runOnce((claim) => {
          for (const r of claim.records) {
            const headers: { [k: string]: string } = {};
            for (const [k, v] of Object.entries(r.headers ?? {})) headers[k] = v.toString("base64");
            out.push({ partition: r.partition, offset: r.offset, key: r.key?.toString(), value: r.value?.toString(), headers });
          }
        });
        if (!got) break;
      }
      for (const o of out) console.log(JSON.stringify(o));
    } else if (cmd === "wait") {
      // LISTENing and polling once an hour: only a notification wakes it.
      const limit = Number(arg2);
      const out: string[] = [];
      const cons = new Consumer(pool, name, arg, { schema, pollIntervalMs: 3_600_000 });
      await cons.run(async (claim) => {
        out.push(...claim.records.map((r) => r.value!.toString()));
        if (out.length >= limit) cons.stop();
      });
      cons.close();
      for (const v of out) console.log(JSON.stringify({ value: v }));
    } else if (cmd === "enqueue") {
      const c = new Pgmsg(pool, { schema });
      const jobs = Array.from({ length: Number(arg) }, (_, i) => ({ payload: JSON.stringify({ n: i }).replace(":", ": "), kind: "node" }));
      for (const r of await c.enqueueMany(name, jobs)) console.log(JSON.stringify({ id: r.id }));
    } else {
      throw new Error("unknown command " + cmd);
    }
  } finally {
    await pool.end();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
