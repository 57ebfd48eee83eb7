// kafkajs against a Kafka listener, driven by internal/kafkacompat's Go
// tests. Prints JSON lines on stdout (see python/ck_client.py).
//
//   node client.js produce --bootstrap H:P --topic T --count N
//   node client.js group --bootstrap H:P --topic T --group G --expect N
'use strict';
const { Kafka, logLevel, CompressionTypes } = require('kafkajs');

function args() {
  const a = { mode: process.argv[2], count: 200, expect: 200, group: 'kjs-group', baseTs: 1764979200000, timeout: 120 };
  for (let i = 3; i < process.argv.length; i += 2) {
    const k = process.argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    a[k] = process.argv[i + 1];
  }
  for (const k of ['count', 'expect', 'baseTs', 'timeout']) a[k] = Number(a[k]);
  return a;
}

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const str = (b) => (b === null || b === undefined ? null : b.toString());
const headersJSON = (h) =>
  Object.entries(h || {}).map(([key, value]) => ({ key, value: str(value) })).sort((x, y) => (x.key < y.key ? -1 : 1));

async function produce(kafka, a) {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  // One send per batch of 50, so that offsets follow from each batch's base offset.
  for (let start = 0; start < a.count; start += 50) {
    const msgs = [];
    for (let i = start; i < Math.min(start + 50, a.count); i++) {
      msgs.push({ partition: i % 3, key: `kjs-key-${i % 5}`, value: i === 11 ? null : `kjs-value-${i}`,
        headers: { n: String(i), client: 'kafkajs' }, timestamp: String(a.baseTs + i) });
    }
    const res = await producer.send({ topic: a.topic, messages: msgs, acks: -1, compression: CompressionTypes.GZIP });
    const base = {};
    for (const r of res) base[r.partition] = Number(r.baseOffset);
    for (const m of msgs) {
      out({ event: 'delivered', record: { topic: a.topic, partition: m.partition, offset: base[m.partition]++,
        key: m.key, value: m.value, headers: headersJSON(m.headers), timestamp: Number(m.timestamp) } });
    }
  }
  await producer.disconnect();
}

async function group(kafka, a) {
  const consumer = kafka.consumer({ groupId: a.group, sessionTimeout: 10000, heartbeatInterval: 500 });
  await consumer.connect();
  await consumer.subscribe({ topics: [a.topic], fromBeginning: true });
  const seen = new Set();
  let resolve;
  const done = new Promise((r) => { resolve = r; });
  const timer = setTimeout(() => resolve(new Error(`timed out with ${seen.size} of ${a.expect} records`)), a.timeout * 1000);
  await consumer.run({
    autoCommit: true,
    eachMessage: async ({ topic, partition, message }) => {
      const k = `${partition}/${message.offset}`;
      if (seen.has(k)) return;
      seen.add(k);
      out({ event: 'record', record: { topic, partition, offset: Number(message.offset), key: str(message.key),
        value: str(message.value), headers: headersJSON(message.headers), timestamp: Number(message.timestamp) } });
      if (seen.size >= a.expect) resolve(null);
    },
  });
  const err = await done;
  clearTimeout(timer);
  await consumer.commitOffsets([]).catch(() => {});
  await consumer.disconnect(); // commits the offsets resolved so far
  if (err) throw err;
}

async function main() {
  const a = args();
  const kafka = new Kafka({ clientId: 'pgmsg-kafkacompat', brokers: a.bootstrap.split(','), logLevel: logLevel.ERROR,
    retry: { retries: 5 } });
  if (a.mode === 'produce') await produce(kafka, a);
  else if (a.mode === 'group') await group(kafka, a);
  else throw new Error(`unknown mode ${a.mode}`);
}

main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
