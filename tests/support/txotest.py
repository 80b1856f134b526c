"""What the Python tests share: a free TCP port and the test server's admin SQL (MYSQL_*).

    sys.path.insert(0, <tests/support>); import txotest
"""
import os
import socket
import subprocess


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def mysql(sql, db=None):
    """Runs sql with the mariadb client on the test server (MYSQL_*); returns its tab-separated
    output without column names. Raises CalledProcessError when the client fails."""
    cmd = ["mariadb", "--no-defaults", "--protocol=tcp", "--batch", "--skip-column-names",
           "--host=" + os.environ.get("MYSQL_HOST", "127.0.0.1"),
           "--port=" + os.environ.get("MYSQL_PORT", "3306"),
           "--user=" + os.environ.get("MYSQL_USER", "app"),
           "--password=" + os.environ.get("MYSQL_PASSWORD", "secret")]
    if db:
        cmd.append(db)
    return subprocess.run(cmd + ["-e", sql], check=True, capture_output=True,
                          text=True).stdout.strip()
