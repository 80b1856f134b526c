// Checks txo's log lines with parsers that are not txo's: each logfmt line (it starts with
// "ts=") is read by the npm logfmt package, each JSON line (it starts with '{"ts"') by
// JSON.parse. A line passes when it starts with ts, level, component and msg, every other word
// is one key=value pair (no free text), keys are [a-z0-9_.]+ and unique, and in JSON the
// fields that hold counts and durations are numbers.
//
// Usage: node check_logs.mjs [--all] [--print] FILE...
//   --all    every non-empty line must be a log line (otherwise other output is skipped)
//   --print  print each parsed line as one JSON object on stdout
// Exits 1 and names the file, line and reason for each line that fails.
import { readFileSync } from "node:fs";
import logfmt from "logfmt";

const KEY = /^[a-z0-9_.]+$/;
const HEAD = ["ts", "level", "component", "msg"];
const LEVELS = new Set(["error", "warn", "info", "debug"]);
const TS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
// Fields whose name says they hold a count or a duration: JSON must give them as numbers.
const NUMERIC = /_(ms|us|s|bytes)$|^(count|size|attempt|attempts|port|delivery|offset|partition|signal|rows)$/;

// The words of a logfmt line (split at spaces outside quotes) and how many of them hold an
// '=' outside quotes; a backslash escapes the next character, as the logfmt package reads it.
function logfmtWords(line) {
  const words = [];
  let word = "";
  let inQuote = false;
  let pairs = 0;
  let sawEq = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === "\\") {
      word += c + (line[i + 1] ?? "");
      i++;
    } else if (c === '"') {
      inQuote = !inQuote;
      word += c;
    } else if (c === " " && !inQuote) {
      if (word.length > 0) words.push(word);
      word = "";
      sawEq = false;
    } else {
      if (c === "=" && !inQuote && !sawEq) {
        pairs++;
        sawEq = true;
      }
      word += c;
    }
  }
  if (word.length > 0) words.push(word);
  return { words, pairs, inQuote };
}

// The member names of a flat JSON object, in order, repeated ones included.
function jsonKeys(line) {
  const keys = [];
  let depth = 0;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") depth--;
    else if (c === '"') {
      let j = i + 1;
      let s = "";
      while (j < line.length && line[j] !== '"') {
        if (line[j] === "\\") j++;
        s += line[j];
        j++;
      }
      let k = j + 1;
      while (line[k] === " ") k++;
      if (depth === 1 && line[k] === ":") keys.push(s);
      i = j;
    }
  }
  return keys;
}

function checkHead(keys, obj) {
  for (let i = 0; i < HEAD.length; i++) {
    if (keys[i] !== HEAD[i]) return `key ${i + 1} is ${keys[i]}, not ${HEAD[i]}`;
  }
  if (!TS.test(obj.ts)) return `ts ${obj.ts} is not an RFC 3339 UTC time in milliseconds`;
  if (!LEVELS.has(obj.level)) return `level ${obj.level} is not a level`;
  for (const k of keys) if (!KEY.test(k)) return `key "${k}" is not [a-z0-9_.]+`;
  const seen = new Set();
  for (const k of keys) {
    if (seen.has(k)) return `key ${k} repeats`;
    seen.add(k);
  }
  return null;
}

function checkLogfmt(line) {
  const obj = logfmt.parse(line);
  const { words, pairs, inQuote } = logfmtWords(line);
  if (inQuote) return [obj, "a quoted value does not end"];
  if (pairs !== words.length) return [obj, `${words.length - pairs} word(s) are not key=value`];
  const keys = words.map((w) => w.slice(0, w.indexOf("=")));
  if (Object.keys(obj).length !== keys.length) return [obj, "the parser found other keys"];
  return [obj, checkHead(keys, obj)];
}

function checkJson(line) {
  let obj;
  try {
    obj = JSON.parse(line);
  } catch (e) {
    return [null, `not JSON: ${e.message}`];
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) return [obj, "not an object"];
  const keys = jsonKeys(line);
  const bad = checkHead(keys, obj);
  if (bad) return [obj, bad];
  for (const k of keys) {
    const v = obj[k];
    if (v !== null && typeof v === "object") return [obj, `${k} is not a scalar`];
    if (NUMERIC.test(k) && typeof v !== "number") return [obj, `${k} is ${typeof v}, not a number`];
  }
  return [obj, null];
}

const args = process.argv.slice(2);
const all = args.includes("--all");
const print = args.includes("--print");
let failures = 0;
let checked = 0;
for (const file of args.filter((a) => !a.startsWith("--"))) {
  const lines = readFileSync(file, "utf8").split("\n");
  lines.forEach((line, i) => {
    let result;
    if (line.startsWith("ts=")) result = checkLogfmt(line);
    else if (line.startsWith('{"ts"')) result = checkJson(line);
    else if (all && line.length > 0) result = [null, "not a log line"];
    else return;
    checked++;
    const [obj, why] = result;
    if (why) {
      failures++;
      console.error(`${file}:${i + 1}: ${why}: ${line}`);
    }
    if (print) console.log(JSON.stringify(obj));
  });
}
if (failures > 0) {
  console.error(`${failures} of ${checked} log line(s) failed`);
  process.exit(1);
}
