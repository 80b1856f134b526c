// The reference rate for bench/binlog_nats.sh: N JetStream publishes by nats.js to the stream
// the relay uses (TXO_EVENTS, subjects txo.events.>), awaiting every PubAck, in windows of
// WINDOW messages in flight (the relay's batch size), each with a Nats-Msg-Id as the relay
// sends it and a ~200-byte JSON payload like the relay's envelope. Prints "events/s".
//
//   node publish.mjs URL N [WINDOW]
import { connect, headers } from "nats";

const [url, nArg, windowArg] = process.argv.slice(2);
const n = Number(nArg), window = Number(windowArg || 500);
if (!url || !(n > 0) || !(window > 0)) {
    console.error("usage: node publish.mjs URL N [WINDOW]");
    process.exit(2);
}
const nc = await connect({ servers: url });
const jsm = await nc.jetstreamManager();
try {
    await jsm.streams.info("TXO_EVENTS");
} catch {
    await jsm.streams.add({ name: "TXO_EVENTS", subjects: ["txo.events.>"], duplicate_window: 120e9 });
}
const js = nc.jetstream();
const run = `${process.pid}-${Date.now()}`;
const body = (i) =>
    new TextEncoder().encode(JSON.stringify({
        id: i, type: "OrderCreated", aggregate_type: "order", aggregate_id: String(i % 10000),
        idempotency_key: `js:${run}:${i}`, created_at: new Date().toISOString(), attempt: 1,
        payload: { order_id: i % 10000, n: i, note: "x".repeat(100) },
    }));
const t0 = process.hrtime.bigint();
for (let at = 0; at < n; at += window) {
    const acks = [];
    for (let i = at; i < Math.min(n, at + window); i++) {
        const h = headers();
        h.set("Nats-Msg-Id", `js:${run}:${i}`);
        acks.push(js.publish("txo.events.order.OrderCreated", body(i), { headers: h }));
    }
    await Promise.all(acks);
}
const s = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(Math.round(n / s));
await nc.close();
