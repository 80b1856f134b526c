// An HTTP endpoint for `txo relay --publisher webhook --envelope cloudevents-binary`: every POST
// is read by the CloudEvents JavaScript SDK (an implementation independent of txo) from its
// headers and body as they arrived, validated, and printed as one JSON line on stdout with the
// attributes the SDK saw; a request the SDK rejects is answered 400 and printed as
// {"rejected": "..."}. Usage: node ce_http_sink.mjs PORT. Runs until killed.
import { createServer } from "node:http";
import { HTTP } from "cloudevents";

const port = Number(process.argv[2]);
createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    try {
      const ev = HTTP.toEvent({ headers: req.headers, body });
      ev.validate();
      console.log(JSON.stringify({
        binary: HTTP.isEvent({ headers: req.headers, body }) && !("content-type" in req.headers &&
          req.headers["content-type"].startsWith("application/cloudevents+json")),
        specversion: ev.specversion, id: ev.id, source: ev.source, type: ev.type,
        subject: ev.subject, time: ev.time, datacontenttype: ev.datacontenttype, data: ev.data,
        txoid: ev.txoid, txoattempt: ev.txoattempt, txoaggregateid: ev.txoaggregateid,
      }));
      res.writeHead(200).end();
    } catch (e) {
      console.log(JSON.stringify({ rejected: String(e && e.message ? e.message : e) }));
      res.writeHead(400).end();
    }
  });
}).listen(port, "127.0.0.1", () => console.error(`listening on ${port}`));
