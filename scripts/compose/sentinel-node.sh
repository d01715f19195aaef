#!/bin/sh
# One Sentinel-managed node of the compose `sentinel` profile, in one
# container: a primary, its replica and three sentinels, five redis-server
# processes. Every process listens on the port the host maps to it and
# they find each other at 127.0.0.1, so the address the sentinels hand out
# (127.0.0.1:<port>) is right both inside the container and on the host.
#
#   sentinel-node.sh NAME PRIMARY_PORT REPLICA_PORT SENTINEL_PORT...
#
# Every start is a fresh set (no persistence, the sentinels' files written
# anew): the first port is the primary again. /tmp/ready is non-empty once
# the replica is in sync and every sentinel knows it and the other sentinels.
set -eu
name=$1 primary=$2 replica=$3
shift 3
sentinels=$*
# Shell builtins and redis binaries only: the local image has no coreutils
# but `sleep`.
dir=/data
: >/tmp/ready

pids=
trap 'kill $pids 2>/dev/null; wait; exit 0' TERM INT
server() {
    redis-server "$@" --save "" --appendonly no --protected-mode no \
        --maxmemory-policy noeviction --dir "$dir" &
    pids="$pids $!"
}
# Waits (a minute at most) until "$@" succeeds.
await() {
    i=0
    until "$@"; do
        i=$((i + 1))
        [ "$i" -lt 600 ] || { echo "$name: gave up waiting for: $*" >&2; exit 1; }
        sleep 0.1
    done
}
synced() {
    case $(redis-cli -p "$replica" info replication) in
        *master_link_status:up*) return 0 ;;
    esac
    return 1
}
known() {
    [ -n "$(redis-cli -p "$1" sentinel replicas "$name")" ] || return 1
    case $(redis-cli -p "$1" sentinel ckquorum "$name") in
        "OK 3 usable"*) return 0 ;;
    esac
    return 1
}

server --port "$primary"
server --port "$replica" --replicaof 127.0.0.1 "$primary"
await synced
# Sentinels start once the replica is attached: their first INFO of the
# primary lists it, so a failover can be asked for as soon as they agree.
for port in $sentinels; do
    printf '%s\n' "port $port" "protected-mode no" "dir $dir" \
        "sentinel monitor $name 127.0.0.1 $primary 2" \
        "sentinel down-after-milliseconds $name 2000" \
        "sentinel failover-timeout $name 10000" \
        "sentinel parallel-syncs $name 1" >"$dir/sentinel-$port.conf"
    redis-server "$dir/sentinel-$port.conf" --sentinel &
    pids="$pids $!"
done
for port in $sentinels; do
    await known "$port"
done
echo ready >/tmp/ready
echo "$name: ready: primary 127.0.0.1:$primary, replica 127.0.0.1:$replica, sentinels on $sentinels"
wait
