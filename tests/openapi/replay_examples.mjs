// Replays every example of the OpenAPI description against a running server and checks each
// answer against the description with ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1):
// the status, the declared headers, the media type and the body.
//
//   node replay_examples.mjs PORT [ADMIN_TOKEN [SECOND_PORT]]
//
// SECOND_PORT is a server of the same database run with --async and
// --max-connections-per-client 1: it answers the examples of 202 accepted, and, while the
// script holds one connection to it, turns any other away (the examples of 503
// tooManyConnections).
//
// The description is the one the server serves (GET /openapi.json), so the check covers what
// clients get.
//
// How the document's examples make exchanges (its info.description says the same): in one
// operation, the response examples are the answers, and the parameters and request body
// examples of the same name are the request that gets it; a parameter without an example of
// that name is left out. The admin token, when given, goes with every operation whose security
// names the bearer scheme. Some answers need no particular request, only a condition the test
// makes itself (PROVOKED: another method, a body over the limit, a broken head, no token, ...),
// and a few need a state a test cannot make on demand (NOT_REPLAYED: a database that is down,
// a server that is stopping, an error the server cannot map): those are checked against their schema only, and listed as such.
//
// Before any request, every example is checked against its own schema, and every request
// example of a successful exchange against the request's schema. An answer must have its
// example's status, keys (at every depth) and error code. Exits 0 when every check
// passed, 1 otherwise, printing one line per exchange.
import net from "node:net";
import Ajv2020Module from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;
const addFormats = addFormatsModule.default ?? addFormatsModule;

const [portArg, token, secondArg] = process.argv.slice(2);
if (!/^[0-9]+$/.test(portArg ?? "") || (secondArg !== undefined && !/^[0-9]+$/.test(secondArg))) {
    console.error("usage: replay_examples.mjs PORT [ADMIN_TOKEN [SECOND_PORT]]");
    process.exit(2);
}
const PORT = Number(portArg);
const SECOND_PORT = secondArg !== undefined ? Number(secondArg) : null;
let doc; // GET /openapi.json, in main()

// Answers the test provokes itself, whatever the operation (see provoke()), each with what is
// missing to provoke it in this run (null: nothing).
const PROVOKED = new Map([
    ["methodNotAllowed", null], ["malformedRequest", null], ["requestTimeout", null],
    ["bodyTooLarge", null], ["targetTooLong", null], ["headTooLarge", null], ["transferCoding", null],
    ["httpVersion", null], ["notJson", null],
    ["unauthorized", token ? null : "no admin token given"],
    ["tooManyConnections", SECOND_PORT !== null ? null : "no second server given"],
    ["accepted", SECOND_PORT !== null ? null : "no second server given"],
]);
// Answers that need a state the test does not make: checked against their schema only.
const NOT_REPLAYED = new Map([
    ["internal", "needs an error the server cannot map"],
    ["databaseUnavailable", "needs the database down"],
    ["shuttingDown", "needs the server stopping while it reads the request"],
]);
const METHODS = ["get", "put", "post", "delete", "patch", "head", "options"];
const BODY_OVER_LIMIT = 70000; // over --max-body's default, 65536
const HEAD_OVER_LIMIT = 9000; // over the head limit's default, 8192

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

// ---- the document ----

const escape = (part) => String(part).replace(/~/g, "~0").replace(/\//g, "~1");
const pointer = (parts) => "#/" + parts.map(escape).join("/");

// Follows $ref (local references only) and returns the object and its JSON pointer.
function resolve(obj, ptr) {
    for (let hops = 0; obj && obj.$ref !== undefined; hops++) {
        if (hops > 10 || !obj.$ref.startsWith("#/"))
            throw new Error(`cannot follow $ref ${obj.$ref} at ${ptr}`);
        ptr = obj.$ref;
        obj = obj.$ref.slice(2).split("/").reduce((o, p) => o?.[p.replace(/~1/g, "/").replace(/~0/g, "~")], doc);
        if (obj === undefined)
            throw new Error(`dangling $ref ${ptr}`);
    }
    return [obj, ptr];
}

const validators = new Map();
function validator(schemaPtr) {
    if (!validators.has(schemaPtr))
        validators.set(schemaPtr, ajv.compile({ $ref: "openapi.json" + schemaPtr }));
    return validators.get(schemaPtr);
}

function schemaErrors(schemaPtr, value) {
    const v = validator(schemaPtr);
    return v(value) ? null : ajv.errorsText(v.errors, { dataVar: "body" });
}

function mediaType(contentType) {
    return (contentType ?? "").split(";")[0].trim().toLowerCase();
}

// Every operation, with its parameters and scenarios (one per response example).
function operations() {
    const ops = [];
    for (const [path, item] of Object.entries(doc.paths)) {
        for (const method of METHODS) {
            const op = item[method];
            if (!op)
                continue;
            const base = ["paths", path, method];
            const param = (where) => (p, i) => {
                const [obj, ptr] = resolve(p, pointer([...where, "parameters", i]));
                return { ...obj, schemaPtr: `${ptr}/schema` };
            };
            const params = [...(item.parameters ?? []).map(param(["paths", path])),
                ...(op.parameters ?? []).map(param(base))];
            let body = null;
            if (op.requestBody) {
                const [rb, rbPtr] = resolve(op.requestBody, pointer([...base, "requestBody"]));
                const [mt, media] = Object.entries(rb.content)[0];
                body = { mt, media, schemaPtr: `${rbPtr}/content/${escape(mt)}/schema` };
            }
            const scenarios = [];
            for (const [status, r] of Object.entries(op.responses)) {
                const [resp, respPtr] = resolve(r, pointer([...base, "responses", status]));
                for (const [mt, media] of Object.entries(resp.content ?? {})) {
                    const schemaPtr = `${respPtr}/content/${escape(mt)}/schema`;
                    for (const [name, e] of Object.entries(media.examples ?? {}))
                        scenarios.push({ status: Number(status), name, mt, example: resolve(e, "")[0].value, schemaPtr, resp });
                }
            }
            const admin = (op.security ?? doc.security ?? []).some((s) => Object.keys(s).length > 0);
            ops.push({ path, method: method.toUpperCase(), item, op, params, body, scenarios, admin });
        }
    }
    return ops;
}

// ---- static checks ----

function checkStatic(ops, fail) {
    for (const o of ops) {
        const label = `${o.method} ${o.path}`;
        for (const [status, r] of Object.entries(o.op.responses)) {
            const [resp] = resolve(r, "");
            if (!o.scenarios.some((s) => s.status === Number(status)))
                fail(`${label} ${status}: no example`);
            if (!resp.content)
                fail(`${label} ${status}: no content`);
        }
        for (const s of o.scenarios) {
            const errors = schemaErrors(s.schemaPtr, s.example);
            if (errors)
                fail(`${label} ${s.status} example ${s.name} does not fit its schema: ${errors}`);
        }
        const names = new Set(o.scenarios.map((s) => s.name));
        const requestExamples = [...o.params.map((p) => [p.name, p.examples ?? {}, p.schemaPtr]),
            ...(o.body ? [["body", o.body.media.examples ?? {}, o.body.schemaPtr]] : [])];
        for (const [what, examples, schemaPtr] of requestExamples) {
            for (const [name, e] of Object.entries(examples)) {
                if (!names.has(name))
                    fail(`${label}: request example ${what}.${name} answers no response example`);
                const ok = o.scenarios.some((s) => s.name === name && s.status < 300);
                if (!ok)
                    continue; // the request of an error is often meant not to fit
                const errors = schemaErrors(schemaPtr, resolve(e, "")[0].value);
                if (errors)
                    fail(`${label}: request example ${what}.${name} of a successful exchange does not fit its schema: ${errors}`);
            }
        }
    }
}

// ---- HTTP on a raw socket: the refusals need heads no client library would send ----

// Sends raw bytes and reads the answer until the server closes. null when it never answers.
function exchange(raw, { waitMs = 10000, port = PORT } = {}) {
    return new Promise((resolveP) => {
        const sock = net.connect(port, "127.0.0.1");
        const chunks = [];
        const timer = setTimeout(() => sock.destroy(), waitMs);
        sock.on("connect", () => sock.write(raw));
        sock.on("data", (d) => chunks.push(d));
        sock.on("error", () => {});
        sock.on("close", () => {
            clearTimeout(timer);
            resolveP(parse(Buffer.concat(chunks)));
        });
    });
}

function parse(buf) {
    const end = buf.indexOf("\r\n\r\n");
    if (end < 0)
        return null;
    const lines = buf.subarray(0, end).toString("latin1").split("\r\n");
    const m = /^HTTP\/1\.[01] (\d{3}) /.exec(lines[0]);
    if (!m)
        return null;
    const headers = {};
    for (const l of lines.slice(1)) {
        const i = l.indexOf(":");
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
    }
    let body = buf.subarray(end + 4);
    if (headers["content-length"] !== undefined)
        body = body.subarray(0, Number(headers["content-length"]));
    return { status: Number(m[1]), headers, body: body.toString("utf8") };
}

function head(method, target, headers, version = "HTTP/1.1") {
    return `${method} ${target} ${version}\r\n` + Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("") + "\r\n";
}

// The request of a scenario: each parameter's example of that name (or, with first, its first
// example), the body's, and the token on admin operations.
function request(o, name, { first = false, withToken = true } = {}) {
    let path = o.path;
    const query = [];
    const headers = { Host: `127.0.0.1:${PORT}`, Connection: "close" };
    for (const p of o.params) {
        const examples = Object.entries(p.examples ?? {});
        const e = first ? examples[0] : examples.find(([n]) => n === name);
        if (!e) {
            if (p.in === "path")
                throw new Error(`${o.method} ${o.path}: path parameter ${p.name} has no example ${name}`);
            continue;
        }
        const v = String(resolve(e[1], "")[0].value);
        if (p.in === "path")
            path = path.replace(`{${p.name}}`, encodeURIComponent(v));
        else if (p.in === "query")
            query.push(`${encodeURIComponent(p.name)}=${encodeURIComponent(v)}`);
        else if (p.in === "header")
            headers[p.name] = v;
    }
    let body = "";
    if (o.body) {
        const examples = Object.entries(o.body.media.examples ?? {});
        const e = first ? examples[0] : examples.find(([n]) => n === name);
        if (e) {
            body = JSON.stringify(resolve(e[1], "")[0].value);
            headers["Content-Type"] = o.body.mt;
        }
    }
    if (o.admin && token && withToken)
        headers.Authorization = `Bearer ${token}`;
    const target = path + (query.length ? "?" + query.join("&") : "");
    return { method: o.method, target, headers, body };
}

function send(r, version, port) {
    const headers = { ...r.headers };
    if (r.body.length > 0 || r.method === "POST" || r.method === "PUT")
        headers["Content-Length"] = Buffer.byteLength(r.body);
    return exchange(head(r.method, r.target, headers, version) + r.body, { port });
}

// The connection that fills the second server's one slot for this client.
function holdSecond() {
    return new Promise((resolveP, rejectP) => {
        const sock = net.connect(SECOND_PORT, "127.0.0.1", () => {
            // the server accepts on its own loop: give it the time to count this one
            setTimeout(() => resolveP(sock), 300);
        });
        sock.on("error", rejectP);
    });
}

// The answer to a refusal the test makes itself.
async function provoke(o, name) {
    const r = request(o, name, { first: true });
    switch (name) {
    case "methodNotAllowed": {
        const other = ["DELETE", "PUT", "PATCH"].find((m) => !o.item[m.toLowerCase()]);
        return send({ ...r, method: other, body: "" });
    }
    case "malformedRequest": {
        const { Host, ...noHost } = r.headers;
        return send({ ...r, headers: noHost });
    }
    case "requestTimeout": // half a head, then nothing: answered once the head deadline passed
        return exchange(`${r.method} ${r.target} HTTP/1.1\r\nHost: 127.0.0.1\r\n`, { waitMs: 20000 });
    case "bodyTooLarge":
        return send({ ...r, body: "x".repeat(BODY_OVER_LIMIT) });
    case "targetTooLong":
        return send({ ...r, target: r.target + (r.target.includes("?") ? "&" : "?") + "pad=" + "a".repeat(HEAD_OVER_LIMIT) });
    case "headTooLarge":
        return send({ ...r, headers: { ...r.headers, "X-Pad": "a".repeat(HEAD_OVER_LIMIT) } });
    case "transferCoding":
        return exchange(head(r.method, r.target, { ...r.headers, "Transfer-Encoding": "gzip" }));
    case "httpVersion":
        return send(r, "HTTP/2.0");
    case "unauthorized":
        return send(request(o, name, { first: true, withToken: false }));
    case "tooManyConnections": // while holdSecond()'s connection is open
        return send(r, "HTTP/1.1", SECOND_PORT);
    case "accepted": // txo serve --async
        return send(request(o, name), "HTTP/1.1", SECOND_PORT);
    case "notJson":
        return send({ ...r, headers: { ...r.headers, "Content-Type": "text/plain" } });
    }
    throw new Error(`no way to provoke ${name}`);
}

// ---- checking an answer ----

const isObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);

// The answer has the example's shape: the same keys in every object, down to the first
// element of arrays that both have one. Values differ (ids, times), keys must not. An empty
// object in an example stands for contents it leaves out.
function sameKeys(got, want, at = "body") {
    if (Array.isArray(got) && Array.isArray(want))
        return got.length > 0 && want.length > 0 ? sameKeys(got[0], want[0], `${at}[0]`) : null;
    if (!isObject(got) || !isObject(want) || Object.keys(want).length === 0)
        return null;
    const kg = Object.keys(got).sort().join(",");
    const kw = Object.keys(want).sort().join(",");
    if (kg !== kw)
        return `${at} has keys {${kg}}, the example {${kw}}`;
    for (const k of Object.keys(got)) {
        const why = sameKeys(got[k], want[k], `${at}.${k}`);
        if (why)
            return why;
    }
    return null;
}

function check(s, got) {
    if (got === null)
        return "no HTTP answer";
    if (got.status !== s.status)
        return `status ${got.status}, want ${s.status}: ${got.body.slice(0, 300)}`;
    for (const [name, h] of Object.entries(s.resp.headers ?? {})) {
        const [hs] = resolve(h, "");
        const v = got.headers[name.toLowerCase()];
        if (v === undefined) {
            if (hs.required)
                return `no ${name} header`;
            continue;
        }
        const value = hs.schema?.type === "integer" && /^-?\d+$/.test(v) ? Number(v) : v;
        if (!ajv.validate(hs.schema ?? {}, value))
            return `header ${name}: ${v}: ${ajv.errorsText(ajv.errors)}`;
    }
    const mt = mediaType(got.headers["content-type"]);
    if (mt !== s.mt)
        return `Content-Type ${got.headers["content-type"]}, want ${s.mt}`;
    let body = got.body;
    if (mt === "application/json") {
        try {
            body = JSON.parse(got.body);
        } catch (e) {
            return `the body is not JSON: ${e.message}`;
        }
    }
    const errors = schemaErrors(s.schemaPtr, body);
    if (errors)
        return `${errors}: ${got.body.slice(0, 300)}`;
    const keys = sameKeys(body, s.example);
    if (keys)
        return keys;
    if (isObject(s.example) && s.example.error !== undefined && body.error !== s.example.error)
        return `error ${body.error}, the example's ${s.example.error}`;
    return null;
}

// ---- main ----

async function main() {
    let failed = 0;
    const fail = (why) => {
        failed++;
        console.log(`FAIL ${why}`);
    };
    const served = await exchange(head("GET", "/openapi.json", { Host: "127.0.0.1", Connection: "close" }));
    if (served === null || served.status !== 200) {
        console.log(`FAIL GET /openapi.json: ${served === null ? "no answer" : served.status}`);
        process.exit(1);
    }
    doc = JSON.parse(served.body);
    ajv.addSchema(doc, "openapi.json");
    const ops = operations();
    checkStatic(ops, fail);

    // The refusals that wait for a deadline run side by side, before the rest.
    const slow = [];
    for (const o of ops)
        for (const s of o.scenarios)
            if (s.name === "requestTimeout")
                slow.push(provoke(o, s.name).then((got) => [o, s, got]));
    const slowDone = await Promise.all(slow);
    const report = (o, s, got) => {
        const why = check(s, got);
        const label = `${o.method} ${o.path} ${s.status} ${s.name}`;
        if (why)
            fail(`${label}: ${why}`);
        else
            console.log(`ok   ${label}`);
    };
    for (const [o, s, got] of slowDone)
        report(o, s, got);

    // The second server's connection limit is filled last, for the scenarios that need it so.
    let replayed = slowDone.length;
    const crowded = [];
    for (const o of ops) {
        for (const s of o.scenarios) {
            const label = `${o.method} ${o.path} ${s.status} ${s.name}`;
            if (s.name === "requestTimeout")
                continue;
            if (s.name === "tooManyConnections" && SECOND_PORT !== null) {
                crowded.push([o, s]);
                continue;
            }
            const missing = NOT_REPLAYED.get(s.name) ?? PROVOKED.get(s.name);
            if (missing) {
                console.log(`--   ${label}: schema only (${missing})`);
                continue;
            }
            const got = PROVOKED.has(s.name) ? await provoke(o, s.name) : await send(request(o, s.name));
            replayed++;
            report(o, s, got);
        }
    }
    if (crowded.length > 0) {
        const holder = await holdSecond();
        for (const [o, s] of crowded) {
            replayed++;
            report(o, s, await provoke(o, s.name));
        }
        holder.destroy();
    }
    console.log(`replay_examples: ${replayed} exchanges replayed, ${failed} failed`);
    process.exit(failed === 0 ? 0 : 1);
}

main().catch((e) => {
    console.log(`FAIL ${e.stack}`);
    process.exit(1);
});
