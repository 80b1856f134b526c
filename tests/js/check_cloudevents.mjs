// Reads what `txo relay --publisher log --envelope cloudevents` printed (one structured-mode
// CloudEvent per line; other lines are ignored) and parses and validates each with the
// CloudEvents JavaScript SDK, an implementation independent of txo. Prints one JSON line per
// event with the attributes the SDK saw, and exits 1 on the first event it rejects.
import { readFileSync } from "node:fs";
import { HTTP } from "cloudevents";

const text = readFileSync(process.argv[2], "utf8");
let n = 0;
for (const line of text.split("\n")) {
  if (!line.startsWith("{")) continue;
  let ev;
  try {
    ev = HTTP.toEvent({
      headers: { "content-type": "application/cloudevents+json; charset=utf-8" },
      body: line,
    });
    ev.validate();
  } catch (e) {
    console.error(`rejected: ${e && e.message ? e.message : e}${e && e.errors ? " " + JSON.stringify(e.errors) : ""}\n${line}`);
    process.exit(1);
  }
  n++;
  console.log(JSON.stringify({
    specversion: ev.specversion, id: ev.id, source: ev.source, type: ev.type,
    subject: ev.subject, time: ev.time, datacontenttype: ev.datacontenttype, data: ev.data,
    txoid: ev.txoid, txoattempt: ev.txoattempt,
  }));
}
console.error(`${n} CloudEvents parsed and valid`);
