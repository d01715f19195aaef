#!/usr/bin/env bash
# The node's CPU per call of the mutex's release and extension scripts,
# against rslock's, on a real redis-server (issue 38). Needs `redis-server`
# and `redis-cli` on the PATH (or REDIS_SERVER / REDIS_CLI), nothing built.
#
#   scripts/lua-cost.sh            # 100 000 calls per figure, 5 rounds
#   N=20000 ROUNDS=3 RT=5000 scripts/lua-cost.sh
#   VERBOSE=1 scripts/lua-cost.sh   # every round's figures too
#
# Starts a private redis-server on a unix socket (no persistence), loads
# each script with SCRIPT LOAD, and for each one feeds `redis-cli --pipe`
# N pairs `SET k tok PX 10000` + `EVALSHA <release> 1 k tok 1` (a lock and
# its release, uncontended: no waiters), or one SET and N `EVALSHA <extend>
# 1 k tok 10000`, after CONFIG RESETSTAT, then reads INFO commandstats:
# `usec_per_call` of `evalsha` (the script, the commands it runs included)
# and of `set`. The scripts' texts are assembled from the files here the
# way `script!` does (src/kinds/keyspace.rs):
#   old:    the prelude (+ the queue, for the release) + the script: the
#           text the mutex sent before the fast path, and its slow path now;
#   new:    the fast path first, then `local function slow()` + old +
#           `end return slow()`, as `script!(fast …)` builds it;
#   rslock: rslock's compare-and-delete / compare-and-pexpire.
# Rounds alternate old / new / rslock; the median of the rounds is printed,
# and the ratio of (SET + release) and of the extension, new / rslock.
#
# Then the node's whole CPU (INFO cpu: used_cpu_user + used_cpu_sys, the
# reading and parsing of requests and the writing of replies included) per
# lock + release, and per extension, with one request per round trip as a
# client sends them (`redis-cli` without --pipe; RT calls, 20 000 by
# default): the figure issue 38 is about. The machine's other load moves
# the commandstats figures by 10-20% (compare the ratios, run it twice)
# and node-cpu by up to 3 times: read that one on a quiet machine only.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-100000}
RT=${RT:-20000}
ROUNDS=${ROUNDS:-5}
SERVER=${REDIS_SERVER:-redis-server}
CLI=${REDIS_CLI:-redis-cli}

dir=$(mktemp -d)
sock="$dir/redis.sock"
"$SERVER" --port 0 --unixsocket "$sock" --save '' --appendonly no \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
cleanup() {
    [ -f "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
r() { "$CLI" -s "$sock" "$@"; }
for _ in $(seq 50); do r ping >/dev/null 2>&1 && break; sleep 0.1; done

k=src/kinds
prelude() {
    cat $k/common.lua $k/mutex/layout.lua $k/reentrant/layout.lua \
        $k/semaphore/layout.lua $k/rwlock/layout.lua $k/keyspace.lua
}
# The assembly of `script!(fast …)`.
fast() { # fast-path file, then the slow text on stdin
    cat "$1"
    printf 'local function slow()\n'
    cat
    printf '\nend\nreturn slow()\n'
}
{ prelude; cat $k/keyspace_queue.lua src/wait/queue.lua $k/mutex/release.lua; } >"$dir/release.old"
fast $k/mutex/release_fast.lua <"$dir/release.old" >"$dir/release.new"
{ prelude; cat $k/mutex/extend.lua; } >"$dir/extend.old"
fast $k/mutex/extend_fast.lua <"$dir/extend.old" >"$dir/extend.new"
printf '%s' 'if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end' >"$dir/release.rslock"
printf '%s' 'if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end' >"$dir/extend.rslock"

declare -A sha
for op in release extend; do
    for v in old new rslock; do
        sha[$op.$v]=$(r -x script load <"$dir/$op.$v")
    done
done

# Inline commands, one per line, as `redis-cli --pipe` takes them.
feed() { # op, sha
    if [ "$1" = release ]; then
        awk -v n="$N" -v sha="$2" 'BEGIN {
            for (i = 0; i < n; i++) {
                printf "SET k tok PX 10000\r\nEVALSHA %s 1 k tok 1\r\n", sha
            } }'
    else
        printf 'SET k tok PX 10000\r\n'
        awk -v n="$N" -v sha="$2" 'BEGIN {
            for (i = 0; i < n; i++) printf "EVALSHA %s 1 k tok 10000\r\n", sha }'
    fi
}
stat() { # command, field
    r info commandstats | tr -d '\r' |
        awk -F'[:,=]' -v c="cmdstat_$1" -v f="$2" '$1 == c {
            for (i = 2; i < NF; i += 2) if ($i == f) print $(i + 1) }'
}
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

declare -A runs
for op in release extend; do
    for v in old new rslock; do
        feed "$op" "${sha[$op.$v]}" >"$dir/$op.$v.in"
        N=$RT feed "$op" "${sha[$op.$v]}" | tr -d '\r' >"$dir/$op.$v.rt"
    done
done
cpu() { r info cpu | tr -d '\r' | awk -F: '$1 == "used_cpu_user" || $1 == "used_cpu_sys" { s += $2 } END { printf "%.6f", s }'; }
for round in $(seq "$ROUNDS"); do
    for op in release extend; do
        for v in old new rslock; do
            r del k >/dev/null
            r config resetstat >/dev/null
            r --pipe <"$dir/$op.$v.in" >/dev/null
            calls=$(stat evalsha calls)
            [ "$calls" = "$N" ] || { echo "$op $v: $calls EVALSHA calls of $N" >&2; exit 1; }
            [ "$(r info errorstats | grep -c errorstat_ || true)" = 0 ] || { echo "$op $v: errors" >&2; exit 1; }
            runs[$op.$v.evalsha]+="$(stat evalsha usec_per_call) "
            [ "$op" = release ] && runs[$op.$v.set]+="$(stat set usec_per_call) "
            r del k >/dev/null
            before=$(cpu)
            r <"$dir/$op.$v.rt" >/dev/null
            after=$(cpu)
            runs[$op.$v.cpu]+="$(awk -v a="$before" -v b="$after" -v n="$RT" 'BEGIN { printf "%.3f", (b - a) * 1e6 / n }') "
        done
    done
done

m() { tr ' ' '\n' <<<"${runs[$1]}" | grep . | median; }
declare -A sums cpus
echo "evalsha, set: INFO commandstats usec_per_call (--pipe, N=$N); sum: evalsha + set;"
echo "node-cpu: INFO cpu user + sys per lock + release / per extension, one request per round trip (RT=$RT)"
echo "redis-server $("$SERVER" --version | sed 's/.* v=\([^ ]*\).*/\1/'), N=$N, median of $ROUNDS rounds, usec_per_call"
printf '%-8s %-7s %8s %8s %8s %9s\n' op script evalsha set sum node-cpu
for op in release extend; do
    for v in old new rslock; do
        e=$(m "$op.$v.evalsha")
        s=0
        [ "$op" = release ] && s=$(m "$op.$v.set")
        sums[$op.$v]=$(awk -v a="$e" -v b="$s" 'BEGIN { print a + b }')
        cpus[$op.$v]=$(m "$op.$v.cpu")
        printf '%-8s %-7s %8.3f %8.3f %8.3f %9.2f\n' "$op" "$v" "$e" "$s" "${sums[$op.$v]}" "${cpus[$op.$v]}"
    done
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
for what in sums cpus; do
    declare -n f=$what
    echo "$what: SET + release: old/rslock $(ratio "${f[release.old]}" "${f[release.rslock]}"), new/rslock $(ratio "${f[release.new]}" "${f[release.rslock]}");" \
        "extend: old/rslock $(ratio "${f[extend.old]}" "${f[extend.rslock]}"), new/rslock $(ratio "${f[extend.new]}" "${f[extend.rslock]}")"
done
if [ -n "${VERBOSE:-}" ]; then
    for key in $(printf '%s\n' "${!runs[@]}" | sort); do echo "$key: ${runs[$key]}"; done
fi
