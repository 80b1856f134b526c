#!/usr/bin/env bash
# The database password from a file (--mysql-password-file, MYSQL_PASSWORD_FILE) and from the
# systemd credential ($CREDENTIALS_DIRECTORY/mysql-password), against the test server named by
# MYSQL_*: `txo migrate --only outbox` on a scratch database connects with the password of the
# file alone, and a file with a wrong password is refused by the server (so the file is what
# is sent, not the built-in default). An unreadable, missing or empty file, or a file given
# together with a password, fails with exit 2 before any connection; a password given wins over
# the credential. Neither the log nor --print-config shows the password.
#   password_file_test.sh (TXO_BIN: the txo command; MYSQL_*: the test server)
set -euo pipefail
txo=${TXO_BIN:?TXO_BIN names the txo command}
password=${MYSQL_PASSWORD:-secret}
db="txo_test_pwfile_$$"
tmp=$(mktemp -d)
mysql_client() {
    mariadb --protocol=TCP -h "${MYSQL_HOST:-127.0.0.1}" -P "${MYSQL_PORT:-3306}" \
        -u "${MYSQL_USER:-app}" --password="$password" -e "$1"
}
cleanup() {
    mysql_client "DROP DATABASE IF EXISTS \`$db\`" || true
    rm -rf "$tmp"
}
trap cleanup EXIT
mysql_client "CREATE DATABASE \`$db\`"
fail() { echo "password_file_test: $*" >&2; exit 1; }

# run WANT_STATUS NAME ENV... -- ARGS...: runs `txo migrate --only outbox` on the scratch
# database without MYSQL_PASSWORD (unless ENV sets it), checks its exit status and that its
# output does not hold the password; the output is left in $tmp/out.
run() {
    local want=$1 name=$2
    shift 2
    local envs=()
    while [ "$1" != -- ]; do
        envs+=("$1")
        shift
    done
    shift
    local status=0
    env -u MYSQL_PASSWORD -u MYSQL_PASSWORD_FILE -u CREDENTIALS_DIRECTORY MYSQL_DATABASE="$db" \
        "${envs[@]}" "$txo" migrate --only outbox "$@" >"$tmp/out" 2>&1 </dev/null || status=$?
    [ "$status" -eq "$want" ] || { cat "$tmp/out" >&2; fail "$name: exit $status, want $want"; }
    if grep -qF -- "$password" "$tmp/out"; then
        cat "$tmp/out" >&2
        fail "$name: the output shows the password"
    fi
    echo "password_file_test: $name: exit $status"
}
expect() { grep -qF -- "$2" "$tmp/out" || { cat "$tmp/out" >&2; fail "$1: no \"$2\""; }; }

printf '%s\n' "$password" >"$tmp/right"
printf '%s' "wrong-$password" >"$tmp/wrong"
: >"$tmp/empty"
printf '\n' >"$tmp/newline"
printf '%s\n\n' "$password" >"$tmp/two-newlines"
chmod 0600 "$tmp"/*

run 0 "file (one trailing newline)" -- --mysql-password-file "$tmp/right"
expect "file" "is up to date"
run 0 "MYSQL_PASSWORD_FILE" MYSQL_PASSWORD_FILE="$tmp/right" --
run 1 "file with a wrong password" -- --mysql-password-file "$tmp/wrong"
expect "file with a wrong password" "Access denied"
run 1 "file with two trailing newlines" -- --mysql-password-file "$tmp/two-newlines"
expect "file with two trailing newlines" "Access denied"

run 2 "missing file" -- --mysql-password-file "$tmp/missing"
expect "missing file" "--mysql-password-file $tmp/missing: cannot open it"
run 2 "empty file" -- --mysql-password-file "$tmp/empty"
expect "empty file" "--mysql-password-file $tmp/empty is empty"
run 2 "file of one newline" -- --mysql-password-file "$tmp/newline"
run 2 "a directory" -- --mysql-password-file "$tmp"
expect "a directory" "cannot read it"
run 2 "file and --mysql-password" -- --mysql-password-file "$tmp/right" --mysql-password "$password"
expect "file and --mysql-password" "give one"
run 2 "file and MYSQL_PASSWORD" MYSQL_PASSWORD="$password" -- --mysql-password-file "$tmp/right"
# Exit 2 before connecting: the same with a server that does not exist fails alike.
run 2 "empty file, no server" MYSQL_HOST=127.0.0.1 MYSQL_PORT=1 -- --mysql-password-file \
    "$tmp/empty"

# The systemd credential.
mkdir "$tmp/cred" "$tmp/wrong-cred" "$tmp/empty-cred" "$tmp/no-cred"
cp "$tmp/right" "$tmp/cred/mysql-password"
cp "$tmp/wrong" "$tmp/wrong-cred/mysql-password"
cp "$tmp/empty" "$tmp/empty-cred/mysql-password"
run 0 "credential" CREDENTIALS_DIRECTORY="$tmp/cred" --
run 1 "credential with a wrong password" CREDENTIALS_DIRECTORY="$tmp/wrong-cred" --
expect "credential with a wrong password" "Access denied"
run 2 "empty credential" CREDENTIALS_DIRECTORY="$tmp/empty-cred" --
expect "empty credential" "systemd credential $tmp/empty-cred/mysql-password is empty"
run 0 "MYSQL_PASSWORD over a wrong credential" CREDENTIALS_DIRECTORY="$tmp/wrong-cred" \
    MYSQL_PASSWORD="$password" --
run 0 "file over a wrong credential" CREDENTIALS_DIRECTORY="$tmp/wrong-cred" -- \
    --mysql-password-file "$tmp/right"
# A credentials directory without mysql-password: the built-in default (no error).
if [ "$password" = secret ]; then
    run 0 "credentials directory without mysql-password" CREDENTIALS_DIRECTORY="$tmp/no-cred" --
fi

run 0 "--print-config" -- --mysql-password-file "$tmp/right" --print-config
expect "--print-config" "mysql-password=***"
expect "--print-config" "mysql-password-file=$tmp/right"
