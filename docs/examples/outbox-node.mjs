// A business change and its outbox event in one transaction, from Node.js with mysql2: all a
// service in another language writes for `txo relay` to publish its events
// (docs/outbox-contract.md). Run it against a database migrated with
// `txo migrate --only outbox`:
//
//   MYSQL_HOST=127.0.0.1 MYSQL_PORT=3306 MYSQL_USER=app MYSQL_PASSWORD=secret \
//   MYSQL_DATABASE=appdb node docs/examples/outbox-node.mjs
//
// It creates its own business table (customers), signs one customer up, and prints the
// event's idempotency key. mysql2 is installed in tests/js (npm ci there).
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";

const require = createRequire(new URL("../../tests/js/package.json", import.meta.url));
const mysql = require("mysql2/promise");

const conn = await mysql.createConnection({
  host: process.env.MYSQL_HOST ?? "127.0.0.1",
  port: Number(process.env.MYSQL_PORT ?? 3306),
  user: process.env.MYSQL_USER,
  password: process.env.MYSQL_PASSWORD,
  database: process.env.MYSQL_DATABASE,
});
// created_at and next_attempt_at default to the session's clock: keep the session in UTC.
await conn.query("SET time_zone = '+00:00'");
await conn.query(`CREATE TABLE IF NOT EXISTS customers (
  id CHAR(36) PRIMARY KEY, email VARCHAR(255) NOT NULL UNIQUE)`);

const id = randomUUID();
const email = process.argv[2] ?? `zoe+${id.slice(0, 8)}@example.com`;
const key = `customer:${id}:signed-up`;
await conn.beginTransaction();
try {
  await conn.execute("INSERT INTO customers (id, email) VALUES (?, ?)", [id, email]);
  await conn.execute(
    `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, idempotency_key)
     VALUES (?, ?, ?, ?, ?)`,
    ["customer", id, "CustomerSignedUp", JSON.stringify({ customer_id: id, email }), key],
  );
  await conn.commit(); // both rows, or neither
} catch (e) {
  await conn.rollback();
  throw e;
} finally {
  await conn.end();
}
console.log(key);
