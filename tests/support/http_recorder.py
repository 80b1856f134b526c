#!/usr/bin/python3
"""An HTTP receiver independent of txo and of libcurl (Python's http.server), for the webhook
row of the transport conformance suite (tests/conformance/test_transport.c): every POST is
answered 200 and appended to FILE as one JSON line {"path", "headers", "body"}, header names
in lower case, a header sent more than once as its values joined by ", " (as HTTP combines
them). The file is opened for each request, so a receiver killed and started again on
the same FILE keeps what the first one recorded.

    http_recorder.py PORT FILE          runs until killed
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode("utf-8", "replace")
        line = json.dumps({
            "path": self.path,
            "headers": {k.lower(): ", ".join(self.headers.get_all(k))
                        for k in self.headers.keys()},
            "body": body,
        })
        with open(sys.argv[2], "a", encoding="utf-8") as f:
            f.write(line + "\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, fmt, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Recorder).serve_forever()
