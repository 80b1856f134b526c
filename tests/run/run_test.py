#!/usr/bin/env python3
"""`make run` shows the failure paths it prints (scripts/run.sh).

run.sh is started as `make run` starts it, on free ports and a database of its own, and the
orders its banner shows are placed over HTTP:
  - customer 123: CONFIRMED, charged once and shipped once;
  - customer 402 (the fake service's declined card): CANCELLED, ChargePayment FAILED with the
    402, the stock back, nothing charged;
  - the SKU "undeliverable" (refused by the fake carrier): CANCELLED, the payment refunded;
  - customer 408 (a charge that takes 4 s) cancelled by the customer meanwhile with
    If-Match "0": 200, then CANCELLED with no charge left unrefunded.
Ctrl-C (SIGINT to the process group, as a terminal sends it) stops txo and the fake service.
Then run.sh with TXO_PAYMENT_URL and TXO_SHIPMENT_URL set calls those services (a fake service
this test starts, whose declined customer is 777) and starts none of its own.

    run_test.py SOURCE_DIR    (TXO_BIN, TXO_FAKE_BIN, MYSQL_*: the test server)
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from txotest import free_port, mysql  # noqa: E402

SRC = sys.argv[1]
DB = "txo_run_walkthrough"
STOCK = 1000  # run.sh's --stock for every SKU the orders use


RUNNING = []  # the process groups of the run.sh still running: killed when the test fails


def fail(msg):
    print("run_test: " + msg, file=sys.stderr)
    for pgid in RUNNING:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sys.exit(1)


def listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def http(method, url, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


class Run:
    """scripts/run.sh in a process group of its own, as a terminal would run it."""

    def __init__(self, log_path, env_extra):
        env = dict(os.environ)
        env.update({"MYSQL_DATABASE": DB, "MYSQL_SOCKET": ""})
        env.update(env_extra)
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([os.path.join(SRC, "scripts/run.sh")], env=env,
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        RUNNING.append(self.proc.pid)

    def wait_ready(self, url):
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.dump()
                fail("run.sh exited with %d before serving" % self.proc.returncode)
            try:
                if http("GET", url + "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.dump()
        fail("txo up did not answer /healthz within 60 s")

    def ctrl_c(self):
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.dump()
            fail("run.sh did not stop within 30 s of Ctrl-C")
        RUNNING.remove(self.proc.pid)
        self.log.close()
        return rc

    def dump(self):
        self.log.flush()
        with open(self.log_path) as f:
            sys.stderr.write(f.read()[-6000:])


def settle(api, order_id):
    """The order once its saga has ended (COMPLETED, COMPENSATED or FAILED)."""
    deadline = time.time() + 30
    while time.time() < deadline:
        status, order = http("GET", "%s/orders/%d" % (api, order_id))
        if status == 200 and order["saga"] and order["saga"]["status"] in (
                "COMPLETED", "COMPENSATED", "FAILED"):
            return order
        time.sleep(0.2)
    fail("order %d: saga not ended within 30 s: %s" % (order_id, order))


def place(api, key, customer, sku, price):
    status, body = http("POST", api + "/orders",
                        {"customer_id": customer,
                         "items": [{"sku": sku, "qty": 1, "price_cents": price}]},
                        {"Idempotency-Key": key})
    if status != 201:
        fail("POST /orders (%s): HTTP %d %s" % (key, status, body))
    return body["order_id"]


def steps(order):
    return {s["name"]: s for s in order["saga"]["steps"]}


def expect(what, got, want):
    if got != want:
        fail("%s: %r, expected %r" % (what, got, want))


def walkthrough(tmp):
    port, fake_port = free_port(), free_port()
    api, fake = "http://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % fake_port
    run = Run(os.path.join(tmp, "run.log"),
              {"TXO_LISTEN": "127.0.0.1:%d" % port, "TXO_FAKE_PORT": str(fake_port)})
    run.wait_ready(api)

    ok = place(api, "walk-1", 123, "iphone-15", 100000)
    declined = place(api, "walk-2", 402, "iphone-15", 100000)
    refused = place(api, "walk-3", 123, "undeliverable", 500)
    slow = place(api, "walk-4", 408, "airpods-pro", 25000)
    time.sleep(0.5)  # the charge of customer 408 is under way, 4 s long
    status, body = http("POST", "%s/orders/%d/cancel" % (api, slow), None, {"If-Match": '"0"'})
    expect("cancel during the slow charge", (status, body and body.get("status")),
           (200, "CANCELLED"))

    order = settle(api, ok)
    expect("customer 123", (order["status"], order["saga"]["status"]),
           ("CONFIRMED", "COMPLETED"))

    order = settle(api, declined)
    expect("customer 402", (order["status"], order["saga"]["status"]),
           ("CANCELLED", "COMPENSATED"))
    charge = steps(order)["ChargePayment"]
    expect("customer 402's ChargePayment", charge["status"], "FAILED")
    if "HTTP 402" not in (charge["error"] or ""):
        fail("customer 402's ChargePayment error names no 402: %r" % charge["error"])

    order = settle(api, refused)
    expect("undeliverable", (order["status"], order["saga"]["status"]),
           ("CANCELLED", "COMPENSATED"))
    expect("undeliverable's CreateShipment", steps(order)["CreateShipment"]["status"], "FAILED")

    order = settle(api, slow)
    expect("customer 408", order["status"], "CANCELLED")

    # What the fake services recorded, per order: money moved only where it stayed.
    def recorded(order_id):
        status, body = http("GET", "%s/stats?order_id=%d" % (fake, order_id))
        expect("GET /stats", status, 200)
        o = body["order"]
        return (o["charges"], o["refunds"], o["shipments"], o["cancels"])

    expect("services for customer 123", recorded(ok), (1, 0, 1, 0))
    expect("services for customer 402", recorded(declined), (0, 0, 0, 0))
    expect("services for the undeliverable order", recorded(refused), (1, 1, 0, 0))
    charges, refunds, shipments, _ = recorded(slow)
    expect("customer 408: charges left unrefunded, shipments", (charges - refunds, shipments),
           (0, 0))

    # The stock of every cancelled order is back.
    stock = mysql("SELECT sku, available FROM inventory WHERE sku IN "
                  "('iphone-15','undeliverable','airpods-pro') ORDER BY sku", DB)
    expect("inventory", stock.split("\n"),
           ["airpods-pro\t%d" % STOCK, "iphone-15\t%d" % (STOCK - 1),
            "undeliverable\t%d" % STOCK])

    rc = run.ctrl_c()
    expect("run.sh exit status after Ctrl-C", rc in (0, 130), True)
    if listening(port) or listening(fake_port):
        fail("txo or the fake service still listens after Ctrl-C")


def real_services(tmp):
    """With the services' URLs set, run.sh calls them and starts no fake of its own."""
    port, own_fake_port, theirs = free_port(), free_port(), free_port()
    service = subprocess.Popen([os.environ["TXO_FAKE_BIN"], "--listen", "127.0.0.1:%d" % theirs,
                                "--declined-customer", "777"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        url = "http://127.0.0.1:%d" % theirs
        api = "http://127.0.0.1:%d" % port
        run = Run(os.path.join(tmp, "run-urls.log"),
                  {"TXO_LISTEN": "127.0.0.1:%d" % port, "TXO_FAKE_PORT": str(own_fake_port),
                   "TXO_PAYMENT_URL": url, "TXO_SHIPMENT_URL": url})
        run.wait_ready(api)
        if listening(own_fake_port):
            fail("run.sh started its fake service although the services' URLs were set")
        order = settle(api, place(api, "urls-1", 777, "usb-c-cable", 900))
        expect("customer 777 on the named payment service", order["status"], "CANCELLED")
        order = settle(api, place(api, "urls-2", 402, "usb-c-cable", 900))
        expect("customer 402 on the named payment service", order["status"], "CONFIRMED")
        run.ctrl_c()
    finally:
        for pgid in RUNNING:
            os.killpg(pgid, signal.SIGKILL)
        service.terminate()
        service.wait(timeout=10)


def main():
    mysql("DROP DATABASE IF EXISTS %s; CREATE DATABASE %s" % (DB, DB))
    with tempfile.TemporaryDirectory() as tmp:
        walkthrough(tmp)
        mysql("DROP DATABASE %s; CREATE DATABASE %s" % (DB, DB))
        real_services(tmp)
    mysql("DROP DATABASE %s" % DB)
    print("run_test: make run's walkthrough, failures and cancel included, holds")


if __name__ == "__main__":
    main()
