#!/usr/bin/env bash
# Validates the OpenAPI description with an implementation that is not ours
# (@seriousme/openapi-schema-validator, from the npm registry, pinned in package-lock.json):
# the document must be valid OpenAPI 3.1.
#   validate.sh SOURCE_DIR
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$1
if [ ! -x "$dir/node_modules/.bin/validate-api" ]; then
    (cd "$dir" && npm ci --silent --no-audit --no-fund)
fi
out=$("$dir/node_modules/.bin/validate-api" "$src/app/order-service/openapi.json" 2>&1) || {
    echo "$out"
    exit 1
}
echo "$out"
echo "$out" | grep -q '"valid": true'
