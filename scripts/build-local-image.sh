#!/usr/bin/env bash
# Builds the Docker image redquorum/redis-local:latest from this machine's own
# redis-server and redis-cli and the shared libraries they load, with no
# registry: the files go into a tarball that `docker import` turns into an
# image. A shell (/bin/sh) and `sleep` come too, for the entry scripts of the
# compose `sentinel` and `cluster` profiles (scripts/compose/); Sentinel is
# the server binary run with `--sentinel`. Use it where `redis:7` cannot be
# pulled:
#
#   scripts/build-local-image.sh
#   REDQUORUM_REDIS_IMAGE=redquorum/redis-local:latest docker-compose up -d
set -euo pipefail

image=${1:-redquorum/redis-local:latest}
command -v docker >/dev/null || { echo "docker is not installed" >&2; exit 1; }
server=$(command -v redis-server) || {
    echo "redis-server is not installed: apt-get install -y redis-server" >&2
    exit 1
}
cli=$(command -v redis-cli || true)
shell=$(command -v dash || command -v sh)
sleep=$(command -v sleep)

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/usr/bin" "$root/tmp" "$root/data" "$root/etc"
chmod 1777 "$root/tmp"
# Debian's redis-server is a link to a binary that picks its role from argv[0]:
# copy the file itself under the right name.
cp -L "$server" "$root/usr/bin/redis-server"
[ -n "$cli" ] && cp -L "$cli" "$root/usr/bin/redis-cli"
cp -L "$shell" "$root/bin/sh"
cp -L "$sleep" "$root/usr/bin/sleep"
# Every library a binary loads, the dynamic loader included, at its path.
for lib in $( (for bin in "$server" $cli "$shell" "$sleep"; do ldd "$bin"; done) | grep -o '/[^ ]*' | sort -u); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
echo 'root:x:0:0:root:/data:/bin/false' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"

tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'WORKDIR /data' \
    --change 'EXPOSE 6379' \
    --change 'CMD ["redis-server"]' \
    - "$image" >/dev/null
echo "$image"
