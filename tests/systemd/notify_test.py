#!/usr/bin/env python3
"""The daemons speak the systemd notify protocol (cmd/txo/notify.c).

A unix datagram socket stands in for systemd (NOTIFY_SOCKET). Checks:
  - `txo relay --publisher null` and `txo serve` send READY=1 and a STATUS once serving,
    WATCHDOG=1 pings when WATCHDOG_USEC is set, and STOPPING=1 on SIGTERM, exiting 0;
  - `txo relay` and `txo serve` against a closed port wait for the database: they keep
    running, report STATUS=waiting for the database and not READY=1, log the wait once, and
    SIGTERM stops them with exit 0; a one-shot `txo relay --drain` fails at once instead.
The happy path needs the test server (MYSQL_*); the relay gets a database of its own.

    notify_test.py            (TXO_BIN: the txo command)
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from txotest import free_port, mysql  # noqa: E402

TXO = os.environ["TXO_BIN"]


class Daemon:
    def __init__(self, tmp, name, args, env_extra):
        self.path = os.path.join(tmp, name + ".sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.messages = []
        env = dict(os.environ)
        env.update(env_extra)
        env["NOTIFY_SOCKET"] = self.path
        self.log = open(os.path.join(tmp, name + ".log"), "w+")
        self.proc = subprocess.Popen([TXO] + args, env=env, stdout=subprocess.DEVNULL,
                                     stderr=self.log)
        self.name = name

    def expect(self, line, timeout_s=20):
        """Waits until a message holds `line` (one of its newline-separated assignments)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if any(line in m.split("\n") for m in self.messages):
                return
            left = deadline - time.monotonic()
            if left <= 0:
                fail(self, "no %r within %ss" % (line, timeout_s))
            self.sock.settimeout(min(left, 0.5))
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except socket.timeout:
                if self.proc.poll() is not None:
                    fail(self, "exited %s before sending %r" % (self.proc.returncode, line))

    def drain(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except socket.timeout:
                pass

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.expect("STOPPING=1")
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail(self, "did not exit within 30 s of SIGTERM")
        if rc != 0:
            fail(self, "exit status %d after SIGTERM" % rc)

    def log_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()


def fail(d, why):
    print("notify_test: %s: %s" % (d.name, why), file=sys.stderr)
    print("messages: %r" % d.messages, file=sys.stderr)
    print("log:\n" + d.log_text(), file=sys.stderr)
    if d.proc.poll() is None:
        d.proc.kill()
    sys.exit(1)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # The database is down: wait, not ready, log once, stop on SIGTERM with 0.
        closed = {"MYSQL_HOST": "127.0.0.1", "MYSQL_PORT": str(free_port()), "MYSQL_SOCKET": ""}
        for name, args in (("relay-nodb", ["relay", "--publisher", "null"]),
                           ("serve-nodb", ["serve", "--listen", "127.0.0.1:%d" % free_port()])):
            d = Daemon(tmp, name, args, closed)
            d.expect("STATUS=waiting for the database")
            d.drain(3)  # a few retries: 250, 500, 1000 ms
            if d.proc.poll() is not None:
                fail(d, "exited %d while the database was down" % d.proc.returncode)
            if any("READY=1" in m.split("\n") for m in d.messages):
                fail(d, "READY=1 without a database")
            waits = d.log_text().count("waiting for the database")
            if waits != 1:
                fail(d, "logged the wait %d times, want once" % waits)
            d.stop()
            print("notify_test: %s waited for the database, stopped with 0" % name)

        # A one-shot `txo relay --drain` does not wait: it fails at once.
        env = dict(os.environ, **closed)
        t0 = time.monotonic()
        rc = subprocess.run([TXO, "relay", "--publisher", "null", "--drain"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=30).returncode
        if rc != 1 or time.monotonic() - t0 > 10:
            print("notify_test: relay --drain without a database: exit %d after %.1f s, want 1 "
                  "at once" % (rc, time.monotonic() - t0), file=sys.stderr)
            sys.exit(1)
        print("notify_test: relay --drain without a database failed at once")

        # The database is up: READY, STATUS, watchdog pings, STOPPING.
        db = "txo_test_notify_%d" % os.getpid()
        mysql("DROP DATABASE IF EXISTS %s; CREATE DATABASE %s" % (db, db))
        try:
            env = {"MYSQL_DATABASE": db}
            subprocess.run([TXO, "migrate"], env=dict(os.environ, **env), check=True,
                           stdout=subprocess.DEVNULL)
            watchdog = dict(env, WATCHDOG_USEC="400000")  # a ping every 200 ms
            for name, args in (("relay", ["relay", "--publisher", "null"]),
                               ("serve", ["serve", "--listen", "127.0.0.1:%d" % free_port()])):
                d = Daemon(tmp, name, args, watchdog)
                d.expect("READY=1")
                if not any(l.startswith("STATUS=") for m in d.messages for l in m.split("\n")):
                    fail(d, "READY=1 came without a STATUS")
                d.messages = []
                d.drain(1)
                pings = sum(m.split("\n").count("WATCHDOG=1") for m in d.messages)
                if pings < 2:
                    fail(d, "%d watchdog pings in 1 s, want ~5" % pings)
                d.stop()
                print("notify_test: %s ready, %d pings/s, stopped with 0" % (name, pings))
        finally:
            mysql("DROP DATABASE IF EXISTS %s" % db)


if __name__ == "__main__":
    main()
