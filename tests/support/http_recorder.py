#!/usr/bin/python3
"""An HTTP receiver independent of txo and of libcurl (Python's http.server), for the webhook
row of the transport conformance suite (tests/conformance/test_transport.c) and as the OTLP
collector of the tracing tests and bench/tracing.sh: every POST is answered 200 and appended
to FILE as one JSON line {"path", "headers", "body"}, header names in lower case, a header
sent more than once as its values joined by ", " (as HTTP combines them). The file is
opened for each request, so a receiver killed and started again on the same FILE keeps what
the first one recorded. Requests are served one at a time, in the order they arrive.
GET /stats answers {"posts": N, "bytes": M}: the POSTs received so far and their body bytes.

    http_recorder.py [--delay SECONDS] PORT FILE   runs until killed
    http_recorder.py --discard PORT                 reads each body and records nothing

--delay SECONDS holds every answer that long after the body was read (a slow collector: a
client that gives up first has closed the connection, and the late answer goes nowhere; a
request that arrives meanwhile waits for the one before it, so it is answered later still).
"""
import argparse
import json
import socket
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def parse_args():
    p = argparse.ArgumentParser(description="HTTP receiver that records every POST")
    p.add_argument("--delay", type=float, default=0.0, metavar="SECONDS",
                   help="answer each POST only after this many seconds")
    p.add_argument("--discard", action="store_true", help="record nothing (no FILE)")
    p.add_argument("port", type=int)
    p.add_argument("file", nargs="?")
    a = p.parse_args()
    if a.delay < 0:
        p.error("--delay must be >= 0")
    if a.file is None and not a.discard:
        p.error("FILE is required unless --discard")
    if a.file is not None and a.discard:
        p.error("--discard takes no FILE")
    return a


ARGS = parse_args()
STATS = {"posts": 0, "bytes": 0}


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode("utf-8", "replace")
        STATS["posts"] += 1
        STATS["bytes"] += length
        if not ARGS.discard:
            line = json.dumps({
                "path": self.path,
                "headers": {k.lower(): ", ".join(self.headers.get_all(k))
                            for k in self.headers.keys()},
                "body": body,
            })
            with open(ARGS.file, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        if ARGS.delay > 0:
            time.sleep(ARGS.delay)
        try:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True

    def do_GET(self):
        if self.path != "/stats":
            self.send_error(404)
            return
        answer = json.dumps(STATS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, fmt, *args):
        pass


class Server(HTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that hung up before the answer is what --delay is for


Server(("127.0.0.1", ARGS.port), Recorder).serve_forever()
