//! Every kind's scripts, run twice with the same arguments on a real node,
//! as a node does when it resends a command on a new connection (see
//! `net`): the second run changes nothing — above all, it never shortens a
//! key that was extended in between, nor counts a hold or a token twice.
//! And a key of a foreign type is a typed WRONGTYPE, never "held".

mod common;

use common::*;
use redquorum::local_servers::{LocalServers, Reply};

/// The key space's prelude, as the crate builds it (see
/// `src/kinds/keyspace.rs`): what every layout uses, each kind's layout,
/// then the owner (and, for the scripts that queue, its questions as the
/// queue asks them).
macro_rules! prelude {
    () => {
        concat!(
            include_str!("../src/kinds/common.lua"),
            include_str!("../src/kinds/mutex/layout.lua"),
            include_str!("../src/kinds/reentrant/layout.lua"),
            include_str!("../src/kinds/semaphore/layout.lua"),
            include_str!("../src/kinds/rwlock/layout.lua"),
            include_str!("../src/kinds/keyspace.lua"),
        )
    };
    (queue) => {
        concat!(prelude!(), include_str!("../src/kinds/keyspace_queue.lua"))
    };
}

/// A script as the crate builds it: the key space's prelude, then the
/// script's own text; with `fast`, a fast path before that text, which
/// becomes the function `slow`.
macro_rules! script {
    (fast $fast:literal; keys $($file:literal),+) => {
        concat!(
            include_str!($fast),
            "local function slow()\n",
            script!(keys $($file),+),
            "\nend\nreturn slow()\n"
        )
    };
    (fast $fast:literal; $($file:literal),+) => {
        concat!(
            include_str!($fast),
            "local function slow()\n",
            script!($($file),+),
            "\nend\nreturn slow()\n"
        )
    };
    ($($file:literal),+) => {
        concat!(
            prelude!(queue),
            include_str!("../src/wait/queue.lua"),
            $(include_str!($file)),+
        )
    };
    (keys $($file:literal),+) => {
        concat!(
            prelude!(),
            $(include_str!($file)),+
        )
    };
}

const MUTEX_ACQUIRE: &str = script!("../src/kinds/mutex/acquire.lua");
const MUTEX_RELEASE: &str =
    script!(fast "../src/kinds/mutex/release_fast.lua"; "../src/kinds/mutex/release.lua");
const MUTEX_EXTEND: &str =
    script!(fast "../src/kinds/mutex/extend_fast.lua"; keys "../src/kinds/mutex/extend.lua");
/// The mutex's release and extension without their fast paths: what the
/// fast path leaves to (`slow`), and what it must agree with.
const MUTEX_RELEASE_SLOW: &str = script!("../src/kinds/mutex/release.lua");
const MUTEX_EXTEND_SLOW: &str = script!(keys "../src/kinds/mutex/extend.lua");
const REENTRANT_ACQUIRE: &str = script!("../src/kinds/reentrant/acquire.lua");
const REENTRANT_RELEASE: &str = script!("../src/kinds/reentrant/release.lua");
const REENTRANT_EXTEND: &str = script!(keys "../src/kinds/reentrant/extend.lua");
const FENCED_ACQUIRE: &str = script!(
    "../src/kinds/fenced/counter.lua",
    "../src/kinds/fenced/acquire.lua"
);
const FENCED_CONFIRM: &str =
    script!(keys "../src/kinds/fenced/counter.lua", "../src/kinds/fenced/confirm.lua");
const ADMIN_CLEAR: &str = script!("../src/kinds/admin/clear.lua");
const SEMAPHORE_ACQUIRE: &str = script!("../src/kinds/semaphore/acquire.lua");
const SEMAPHORE_EXTEND: &str = script!(keys "../src/kinds/semaphore/extend.lua");
const SEMAPHORE_RELEASE: &str = script!("../src/kinds/semaphore/release.lua");
const READ: &str = script!("../src/kinds/rwlock/read.lua");
const READ_EXTEND: &str = script!(keys "../src/kinds/rwlock/extend.lua");
const READ_RELEASE: &str = script!("../src/kinds/rwlock/release.lua");
const ANNOUNCE: &str = script!(keys
    "../src/kinds/fenced/counter.lua",
    "../src/kinds/election/record.lua",
    "../src/kinds/election/announce.lua"
);
const LEADER_EXTEND: &str = script!(keys
    "../src/kinds/election/record.lua",
    "../src/kinds/election/extend.lua"
);
const RESIGN: &str = script!(
    "../src/kinds/election/record.lua",
    "../src/kinds/election/resign.lua"
);
const LEADER: &str = script!(keys
    "../src/kinds/election/record.lua",
    "../src/kinds/election/leader.lua"
);
const OBSERVE: &str = script!(keys
    "../src/kinds/election/record.lua",
    "../src/kinds/election/observe.lua"
);
const LEAVE: &str = script!("../src/wait/leave.lua");
const PASS_ON: &str = script!("../src/wait/pass_on.lua");

const TOKEN: &str = "0123456789abcdef0123456789abcdef01234567";

fn eval(c: &LocalServers, script: &str, keys: &[&str], args: &[&str]) -> Reply {
    let n = keys.len().to_string();
    let mut cmd = vec!["EVAL", script, &n];
    cmd.extend(keys);
    cmd.extend(args);
    redquorum::local_servers::command(c.port(0), &cmd).unwrap()
}

/// Runs `script` twice; both replies must be `expected`.
fn twice(c: &LocalServers, script: &str, keys: &[&str], args: &[&str], expected: Reply) {
    for run in 1..=2 {
        assert_eq!(eval(c, script, keys, args), expected, "run {run}");
    }
}

/// An extension since the first run: 60 s on each key.
fn extend_by_hand(c: &LocalServers, keys: &[&str]) {
    for key in keys {
        run(c, 0, &["PEXPIRE", key, "60000"]);
    }
}

fn assert_long(c: &LocalServers, keys: &[&str]) {
    for key in keys {
        let left = pttl(c, 0, key);
        assert!(
            left > 50_000,
            "{key}: PTTL {left}: the second run shortened it"
        );
    }
}

#[test]
fn a_resent_set_acquisition_leaves_extended_keys_alone() {
    let c = servers(1);
    let keys = ["a", "b"];
    assert_eq!(
        eval(&c, MUTEX_ACQUIRE, &keys, &[TOKEN, "5000", ""]),
        Reply::Int(1)
    );
    extend_by_hand(&c, &keys);
    assert_eq!(
        eval(
            &c,
            MUTEX_ACQUIRE,
            &keys,
            &[TOKEN, "5000", "0000000000000001:c:1"]
        ),
        Reply::Int(1)
    );
    assert_long(&c, &keys);
    // Extensions and releases twice: the same state.
    twice(&c, MUTEX_EXTEND, &keys, &[TOKEN, "1000"], Reply::Int(1));
    assert_long(&c, &keys);
    assert_eq!(eval(&c, MUTEX_RELEASE, &keys, &[TOKEN, "0"]), Reply::Int(1));
    // The resent release finds nothing left: "missing", nothing deleted.
    assert_eq!(eval(&c, MUTEX_RELEASE, &keys, &[TOKEN, "0"]), Reply::Int(0));
    assert_eq!(holders(&c, &[0], "a") + holders(&c, &[0], "b"), 0);
}

#[test]
fn a_resent_take_counts_its_hold_once_and_shortens_nothing() {
    let c = servers(1);
    let owner = "job-1";
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    twice(
        &c,
        REENTRANT_ACQUIRE,
        &["r"],
        &[owner, other, "5000", ""],
        Reply::Int(1),
    );
    assert_eq!(
        eval(&c, REENTRANT_ACQUIRE, &["r"], &[owner, TOKEN, "5000", ""]),
        Reply::Int(1)
    );
    extend_by_hand(&c, &["r"]);
    assert_eq!(
        eval(&c, REENTRANT_ACQUIRE, &["r"], &[owner, TOKEN, "5000", ""]),
        Reply::Int(1)
    );
    assert_long(&c, &["r"]);
    assert_eq!(
        run(&c, 0, &["HLEN", "r"]),
        Reply::Int(4),
        "o, i and two holds"
    );
    // 'i' is the smallest hold token, whatever the order of the takes.
    assert_eq!(hget(&c, "r", "i"), TOKEN);
    twice(
        &c,
        REENTRANT_EXTEND,
        &["r"],
        &[owner, TOKEN, "1000"],
        Reply::Int(1),
    );
    assert_long(&c, &["r"]);
    // Releasing the smallest renames the key by the one left.
    assert_eq!(
        eval(&c, REENTRANT_RELEASE, &["r"], &[owner, TOKEN, "0"]),
        Reply::Int(1)
    );
    assert_eq!(
        eval(&c, REENTRANT_RELEASE, &["r"], &[owner, TOKEN, "0"]),
        Reply::Int(0)
    );
    assert_eq!(hget(&c, "r", "i"), other);
    assert_eq!(run(&c, 0, &["HLEN", "r"]), Reply::Int(3));
}

fn hget(c: &LocalServers, key: &str, field: &str) -> String {
    match run(c, 0, &["HGET", key, field]) {
        Reply::Bulk(Some(v)) => String::from_utf8(v).unwrap(),
        other => panic!("HGET {key} {field}: {other:?}"),
    }
}

#[test]
fn a_resent_fenced_acquisition_draws_no_second_token() {
    let c = servers(1);
    let keys = ["r", "r:fence"];
    let first = eval(&c, FENCED_ACQUIRE, &keys, &[TOKEN, "5000", "", "0"]);
    assert_eq!(first, Reply::Array(Some(vec![Reply::Int(1)])));
    extend_by_hand(&c, &["r"]);
    assert_eq!(
        eval(&c, FENCED_ACQUIRE, &keys, &[TOKEN, "5000", "", "0"]),
        first
    );
    assert_long(&c, &["r"]);
    assert_eq!(get(&c, 0, "r:fence").as_deref(), Some("1"));
    twice(&c, FENCED_CONFIRM, &keys, &[TOKEN, "7"], Reply::Int(1));
    assert_eq!(get(&c, 0, "r:fence").as_deref(), Some("7"));
    // A lower token never lowers the counter.
    assert_eq!(
        eval(&c, FENCED_CONFIRM, &keys, &[TOKEN, "3"]),
        Reply::Int(1)
    );
    assert_eq!(get(&c, 0, "r:fence").as_deref(), Some("7"));
    // Large tokens (the time floor, in µs) are written exactly.
    let floor = "1795463745112196";
    let next = eval(
        &c,
        FENCED_ACQUIRE,
        &["s", "s:fence"],
        &[TOKEN, "5000", "", floor],
    );
    assert_eq!(
        next,
        Reply::Array(Some(vec![Reply::Int(1_795_463_745_112_196)]))
    );
    assert_eq!(get(&c, 0, "s:fence").as_deref(), Some(floor));
}

#[test]
fn a_key_of_a_foreign_type_is_wrongtype_to_every_kind() {
    let c = servers(1);
    run(&c, 0, &["RPUSH", "r", "x"]);
    let wrongtype = |reply: Reply| matches!(reply, Reply::Error(e) if e.starts_with("WRONGTYPE"));
    assert!(wrongtype(eval(
        &c,
        MUTEX_ACQUIRE,
        &["a", "r"],
        &[TOKEN, "5000", "0000000000000001:c:1"]
    )));
    assert!(wrongtype(eval(
        &c,
        REENTRANT_ACQUIRE,
        &["r"],
        &["o", TOKEN, "5000", "0000000000000001:c:1"]
    )));
    assert!(wrongtype(eval(
        &c,
        FENCED_ACQUIRE,
        &["r", "r:fence"],
        &[TOKEN, "5000", "0000000000000001:c:1", "0"]
    )));
    assert!(wrongtype(eval(&c, MUTEX_RELEASE, &["r"], &[TOKEN, "0"])));
    assert!(wrongtype(eval(
        &c,
        REENTRANT_RELEASE,
        &["r"],
        &["o", TOKEN, "0"]
    )));
    assert!(wrongtype(eval(&c, MUTEX_EXTEND, &["r"], &[TOKEN, "5000"])));
    assert!(wrongtype(eval(
        &c,
        REENTRANT_EXTEND,
        &["r"],
        &["o", TOKEN, "5000"]
    )));
    assert!(wrongtype(eval(&c, ADMIN_CLEAR, &["r"], &[TOKEN])));
    // Nothing was taken on the way: the set's other key is still free.
    assert_eq!(holders(&c, &[0], "a"), 0);
    // A hash that no layout claims (no owner field) is no reentrant lock:
    // not "another holder" either, but the same plain error, to every kind.
    run(&c, 0, &["HSET", "h", "user", "data"]);
    assert!(wrongtype(eval(
        &c,
        MUTEX_ACQUIRE,
        &["h"],
        &[TOKEN, "5000", "0000000000000001:c:1"]
    )));
    assert!(wrongtype(eval(
        &c,
        REENTRANT_ACQUIRE,
        &["h"],
        &["o", TOKEN, "5000", ""]
    )));
    assert!(wrongtype(eval(&c, ADMIN_CLEAR, &["h"], &["user"])));
    assert_eq!(
        run(&c, 0, &["HGET", "h", "user"]),
        Reply::Bulk(Some("data".into()))
    );
    // A hash with an owner field and no smallest hold reads as reentrant
    // holds: another holder, named by nothing (told as `holds:` only
    // where there is a hold to name; it once raised a Lua error here).
    run(&c, 0, &["HSET", "f", "o", "someone", "h", "1"]);
    match eval(
        &c,
        MUTEX_ACQUIRE,
        &["f"],
        &[TOKEN, "5000", "0000000000000001:c:1"],
    ) {
        Reply::Array(Some(seen)) => assert_eq!(seen[0], Reply::Bulk(None)),
        reply => panic!("{reply:?}"),
    }
}

/// The key space's owner classifies a key for every kind: a mutex's key is
/// another holder's to a reentrant lock and the other way round, with the
/// token waiters wait for; and an operator's clear lets a hold go by its
/// token whichever kind made it, as that kind's own release would.
#[test]
fn every_kind_sees_every_other_kind_as_another_holder() {
    let c = servers(1);
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    let waiter = "0000000000000001:c:1";
    // A mutex holds "m": the reentrant kind is refused, and told the token.
    assert_eq!(
        eval(&c, MUTEX_ACQUIRE, &["m"], &[TOKEN, "5000", ""]),
        Reply::Int(1)
    );
    match eval(&c, REENTRANT_ACQUIRE, &["m"], &["o", other, "5000", waiter]) {
        Reply::Array(Some(seen)) => assert_eq!(seen[0], Reply::Bulk(Some(TOKEN.into()))),
        reply => panic!("{reply:?}"),
    }
    assert_eq!(
        eval(&c, REENTRANT_ACQUIRE, &["m"], &["o", other, "5000", ""]),
        Reply::Int(0)
    );
    assert_eq!(
        eval(&c, REENTRANT_EXTEND, &["m"], &["o", other, "5000"]),
        Reply::Int(-1)
    );
    assert_eq!(
        eval(&c, REENTRANT_RELEASE, &["m"], &["o", other, "0"]),
        Reply::Int(-1)
    );
    // Reentrant holds of "o" on "r": the mutex and the fenced kind are
    // refused, and told the smallest hold, as `holds:<token>` (one owner,
    // named by whichever hold is the smallest on each node).
    let (h1, h2) = (
        "1111111111111111111111111111111111111111",
        "2222222222222222222222222222222222222222",
    );
    for hold in [h2, h1] {
        assert_eq!(
            eval(&c, REENTRANT_ACQUIRE, &["r"], &["o", hold, "5000", ""]),
            Reply::Int(1)
        );
    }
    match eval(&c, MUTEX_ACQUIRE, &["r"], &[other, "5000", waiter]) {
        Reply::Array(Some(seen)) => {
            assert_eq!(seen[0], Reply::Bulk(Some(format!("holds:{h1}").into())))
        }
        reply => panic!("{reply:?}"),
    }
    assert_eq!(
        eval(
            &c,
            FENCED_ACQUIRE,
            &["r", "r:fence"],
            &[other, "5000", "", "0"]
        ),
        Reply::Int(0)
    );
    assert_eq!(
        eval(&c, MUTEX_EXTEND, &["r"], &[other, "5000"]),
        Reply::Int(-1)
    );
    assert_eq!(
        eval(&c, MUTEX_RELEASE, &["r"], &[other, "0"]),
        Reply::Int(-1)
    );
    assert_eq!(
        eval(&c, FENCED_CONFIRM, &["r", "r:fence"], &[other, "1"]),
        Reply::Int(-1)
    );
    // Clearing by token: a token the key does not hold changes nothing; one
    // hold goes and the key stays while another is left; the last one
    // takes the key with it.
    assert_eq!(eval(&c, ADMIN_CLEAR, &["r"], &[other]), Reply::Int(-1));
    assert_eq!(eval(&c, ADMIN_CLEAR, &["r"], &["o"]), Reply::Int(-1));
    assert_eq!(eval(&c, ADMIN_CLEAR, &["r"], &[h1]), Reply::Int(1));
    assert_eq!(hget(&c, "r", "i"), h2, "the smallest hold left");
    assert_eq!(eval(&c, ADMIN_CLEAR, &["r"], &[h2]), Reply::Int(1));
    assert_eq!(run(&c, 0, &["EXISTS", "r"]), Reply::Int(0));
    assert_eq!(eval(&c, ADMIN_CLEAR, &["m"], &[TOKEN]), Reply::Int(1));
    assert_eq!(eval(&c, ADMIN_CLEAR, &["m"], &[TOKEN]), Reply::Int(0));
}

/// A counter that cannot grow (at 2^53 - 1: Lua's doubles stop counting at
/// 2^53) or a floor beyond it is an error before anything is written, and
/// so is a counter that is not a number (or not a string): no lock key is
/// left behind an error vote.
#[test]
fn a_fenced_counter_that_cannot_grow_fails_before_any_write() {
    let c = servers(1);
    let cannot_grow = |reply: &Reply| matches!(reply, Reply::Error(e) if e.contains("cannot grow"));
    let not_a_counter =
        |reply: &Reply, key: &str| *reply == Reply::Error(format!("BADFENCE {key}:fence"));
    run(&c, 0, &["SET", "a:fence", "9007199254740991"]);
    run(&c, 0, &["SET", "b:fence", "not-a-number"]);
    run(&c, 0, &["HSET", "c:fence", "x", "y"]);
    for key in ["a", "b", "c"] {
        let counter = format!("{key}:fence");
        let reply = eval(
            &c,
            FENCED_ACQUIRE,
            &[key, &counter],
            &[TOKEN, "5000", "", "0"],
        );
        let expected = if key == "a" {
            cannot_grow(&reply)
        } else {
            not_a_counter(&reply, key)
        };
        assert!(expected, "{key}: {reply:?}");
        assert_eq!(holders(&c, &[0], key), 0, "{key} was taken behind an error");
    }
    // A floor at 2^53 (a clock beyond the year 2255).
    let reply = eval(
        &c,
        FENCED_ACQUIRE,
        &["d", "d:fence"],
        &[TOKEN, "5000", "", "9007199254740992"],
    );
    assert!(cannot_grow(&reply), "{reply:?}");
    assert_eq!(holders(&c, &[0], "d"), 0);
    let reply = eval(&c, FENCED_CONFIRM, &["b", "b:fence"], &[TOKEN, "7"]);
    assert!(not_a_counter(&reply, "b"), "{reply:?}");
}

/// Lua 5.1's `tonumber` reads `nan`, `inf`, `-5` and `1.5` as numbers: a
/// NaN fails every comparison (and survives `math.max`), so `nan` was taken
/// as a counter, the key written and i64::MIN replied; `confirm` said yes.
/// Every script that reads a counter refuses anything but a whole number
/// from 0 below 2^53 with `BADFENCE <counter key>`, before it writes
/// anything.
#[test]
fn a_fenced_counter_that_is_not_a_whole_number_is_refused_before_any_write() {
    let c = servers(1);
    for (i, bad) in ["nan", "-nan", "inf", "-inf", "-5", "1.5", "1e300"]
        .into_iter()
        .enumerate()
    {
        let (key, counter) = (format!("k{i}"), format!("k{i}:fence"));
        run(&c, 0, &["SET", &counter, bad]);
        let refused = |reply: Reply| reply == Reply::Error(format!("BADFENCE {counter}"));
        for floor in ["0", "1795463745112196"] {
            let reply = eval(
                &c,
                FENCED_ACQUIRE,
                &[&key, &counter],
                &[TOKEN, "5000", "", floor],
            );
            assert!(refused(reply.clone()), "{bad}: {reply:?}");
            assert_eq!(holders(&c, &[0], &key), 0, "{bad}: the key was written");
            assert_eq!(get(&c, 0, &counter).as_deref(), Some(bad), "{bad}");
        }
        // Our key already there (a resent acquisition): refused all the same.
        run(&c, 0, &["SET", &key, TOKEN, "PX", "60000"]);
        let reply = eval(
            &c,
            FENCED_ACQUIRE,
            &[&key, &counter],
            &[TOKEN, "5000", "", "0"],
        );
        assert!(refused(reply.clone()), "{bad}: resent: {reply:?}");
        let reply = eval(&c, FENCED_CONFIRM, &[&key, &counter], &[TOKEN, "7"]);
        assert!(refused(reply.clone()), "{bad}: confirm: {reply:?}");
        assert_eq!(get(&c, 0, &counter).as_deref(), Some(bad), "{bad}");
    }
}

/// The waiters' queue (`src/wait/queue.lua`): waiters are kept in the
/// order their waits began, whatever order their attempts arrived in (so
/// that every node wakes the same one); a release wakes the first whose
/// client listens, skipping and dropping those nobody hears; the waiter
/// that gets the lock leaves the queue; and the queue expires.
#[test]
fn the_queue_orders_waiters_by_when_they_began_and_a_release_wakes_the_first_heard() {
    use std::io::{BufRead, BufReader, Write};
    let c = servers(1);
    let (aa, bb, cc) = (
        "0000000000000001:aa:1",
        "0000000000000002:bb:1",
        "0000000000000003:cc:1",
    );
    run(&c, 0, &["SET", "k", TOKEN, "PX", "60000"]);
    let other = "ffffffffffffffffffffffffffffffffffffffff";
    // Arriving as cc, aa, bb.
    for waiter in [cc, aa, bb] {
        match eval(&c, MUTEX_ACQUIRE, &["k"], &[other, "5000", waiter]) {
            Reply::Array(Some(seen)) => assert_eq!(seen[0], Reply::Bulk(Some(TOKEN.into()))),
            reply => panic!("{reply:?}"),
        }
    }
    let queue = |c: &LocalServers| match run(c, 0, &["ZRANGE", "k:waiters", "0", "-1"]) {
        Reply::Array(Some(names)) => names
            .into_iter()
            .map(|n| match n {
                Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
                n => panic!("{n:?}"),
            })
            .collect::<Vec<_>>(),
        reply => panic!("{reply:?}"),
    };
    assert_eq!(queue(&c), [aa, bb, cc]);
    // Kept a while past the holder's expiry, not for ever.
    match run(&c, 0, &["PTTL", "k:waiters"]) {
        Reply::Int(left) => assert!((60_000..=66_000).contains(&left), "{left}"),
        reply => panic!("{reply:?}"),
    }
    // Only bb's client listens.
    let mut listener = std::net::TcpStream::connect(("127.0.0.1", c.port(0))).unwrap();
    listener
        .write_all(b"*2\r\n$9\r\nSUBSCRIBE\r\n$9\r\nk:wake:bb\r\n")
        .unwrap();
    listener
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut reader = BufReader::new(listener);
    let mut lines = Vec::new();
    let mut read_lines = |n: usize, lines: &mut Vec<String>| {
        for _ in 0..n {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            lines.push(line.trim_end().to_owned());
        }
    };
    // The subscription's confirmation: *3, $9 subscribe, $9 k:wake:bb, :1.
    read_lines(6, &mut lines);
    assert_eq!(lines.last().map(String::as_str), Some(":1"), "{lines:?}");
    // A monitoring tool hears every channel, aa's too: it wakes nobody, and
    // aa must not count as heard for it.
    let mut monitor = std::net::TcpStream::connect(("127.0.0.1", c.port(0))).unwrap();
    monitor
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    monitor
        .write_all(b"*2\r\n$10\r\nPSUBSCRIBE\r\n$1\r\n*\r\n")
        .unwrap();
    // Its confirmation: *3, $10 psubscribe, $1 *, :1.
    let mut monitor = BufReader::new(monitor);
    let mut confirmed = String::new();
    for _ in 0..6 {
        monitor.read_line(&mut confirmed).unwrap();
    }
    assert!(confirmed.ends_with(":1\r\n"), "{confirmed:?}");
    assert_eq!(
        eval(&c, MUTEX_RELEASE, &["k"], &[TOKEN, "1"]),
        Reply::Int(1)
    );
    // aa is heard by no client of its own (only by the monitor): dropped;
    // bb is woken and taken out; cc waits.
    lines.clear();
    read_lines(7, &mut lines);
    assert_eq!(
        lines[6],
        format!("{bb} {TOKEN}"),
        "the wake-up on k:wake:bb: {lines:?}"
    );
    assert_eq!(queue(&c), [cc]);
    // cc takes the free key and leaves the queue, which goes with it.
    assert_eq!(
        eval(&c, MUTEX_ACQUIRE, &["k"], &[other, "5000", cc]),
        Reply::Int(1)
    );
    assert_eq!(queue(&c), Vec::<String>::new());
    assert_eq!(run(&c, 0, &["EXISTS", "k:waiters"]), Reply::Int(0));
    // Where an ACL forbids PUBSUB, PUBLISH's count decides, as it did: the
    // release still wakes bb's next wait, queued behind cc.
    run(&c, 0, &["ACL", "SETUSER", "default", "-pubsub"]);
    let ee = "0000000000000005:bb:2";
    match eval(&c, MUTEX_ACQUIRE, &["k"], &[TOKEN, "5000", ee]) {
        Reply::Array(Some(seen)) => assert_eq!(seen[0], Reply::Bulk(Some(other.into()))),
        reply => panic!("{reply:?}"),
    }
    assert_eq!(
        eval(&c, MUTEX_RELEASE, &["k"], &[other, "1"]),
        Reply::Int(1)
    );
    lines.clear();
    read_lines(7, &mut lines);
    assert_eq!(lines[6], format!("{ee} {other}"), "{lines:?}");
    assert_eq!(queue(&c), Vec::<String>::new());
}

fn slot(reply: Reply) -> (i64, String) {
    match reply {
        Reply::Array(Some(items)) => match items.as_slice() {
            [
                Reply::Bulk(Some(tag)),
                Reply::Int(slot),
                Reply::Bulk(Some(free)),
            ] if tag.as_slice() == b"slot" => (*slot, String::from_utf8(free.clone()).unwrap()),
            _ => panic!("{items:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// A semaphore's scripts run twice change nothing the second time: the
/// same slot, never shortened, no second slot; a slot our token took on a
/// node that the others did not grant goes at our first extension there;
/// each slot ends at its own expiry.
#[test]
fn a_resent_permit_takes_one_slot_and_shortens_nothing() {
    let c = servers(1);
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    // The hint, slot 1, is free: taken, twice.
    let args = [TOKEN, "5000", "3", "1", ""];
    assert_eq!(
        slot(eval(&c, SEMAPHORE_ACQUIRE, &["s"], &args)),
        (1, "111".into())
    );
    run(&c, 0, &["HSET", "s", "x1", "99999999999999"]);
    assert_eq!(
        slot(eval(&c, SEMAPHORE_ACQUIRE, &["s"], &args)),
        (1, "111".into())
    );
    assert_eq!(hget(&c, "s", "x1"), "99999999999999", "not shortened");
    // Another holder hinting slot 1 gets the lowest free one, and is told
    // which slots were free.
    let theirs = [other, "5000", "3", "1", ""];
    assert_eq!(
        slot(eval(&c, SEMAPHORE_ACQUIRE, &["s"], &theirs)),
        (0, "101".into())
    );
    // A slot our token was granted on a node where the others granted
    // another (made by hand here): our first extension there lets it go.
    run(&c, 0, &["HSET", "s", "t2", TOKEN, "x2", "99999999999999"]);
    twice(
        &c,
        SEMAPHORE_EXTEND,
        &["s"],
        &[TOKEN, "8000", "1"],
        Reply::Int(1),
    );
    assert_eq!(run(&c, 0, &["HEXISTS", "s", "t2"]), Reply::Int(0));
    assert_eq!(hget(&c, "s", "x1"), "99999999999999", "never shortened");
    // A third token: slot 2; a fourth finds all three held.
    let third = "1111111111111111111111111111111111111111";
    assert_eq!(
        slot(eval(
            &c,
            SEMAPHORE_ACQUIRE,
            &["s"],
            &[third, "5000", "3", "0", ""]
        ))
        .0,
        2
    );
    let fourth = "2222222222222222222222222222222222222222";
    twice(
        &c,
        SEMAPHORE_ACQUIRE,
        &["s"],
        &[fourth, "5000", "3", "0", ""],
        Reply::Int(0),
    );
    // A waiter is told the name of the semaphore's holders, who holds
    // which slot (whichever slot ends first here), and the soonest slot's
    // PTTL; a waiter of another kind the same name.
    let waiter = "0000000000000001:c:1";
    let seen = |script: &str, args: &[&str]| match eval(&c, script, &["s"], args) {
        Reply::Array(Some(seen)) => match seen.as_slice() {
            [Reply::Bulk(Some(name)), Reply::Int(ms)] if *ms > 0 && *ms <= 8000 => {
                String::from_utf8(name.clone()).unwrap()
            }
            _ => panic!("{seen:?}"),
        },
        other => panic!("{other:?}"),
    };
    let name = |slots: &[&str]| {
        let digest = run(
            &c,
            0,
            &[
                "EVAL",
                "return redis.sha1hex(ARGV[1])",
                "0",
                &slots.join(","),
            ],
        );
        let Reply::Bulk(Some(digest)) = digest else {
            panic!("{digest:?}")
        };
        format!("permits:3:{}", String::from_utf8(digest).unwrap())
    };
    let held = name(&[other, TOKEN, third]);
    let waits = seen(SEMAPHORE_ACQUIRE, &[fourth, "5000", "3", "0", waiter]);
    assert_eq!(waits, held);
    let ends = hget(&c, "s", "x0");
    run(&c, 0, &["HSET", "s", "x0", "99999999999998"]);
    assert_eq!(
        seen(SEMAPHORE_ACQUIRE, &[fourth, "5000", "3", "0", waiter]),
        held,
        "the same holders in the same slots, another ending first"
    );
    assert_eq!(seen(MUTEX_ACQUIRE, &[fourth, "5000", waiter]), held);
    // Another holder in a slot (a contender's grant, say): another name.
    run(&c, 0, &["HSET", "s", "t2", fourth]);
    let fifth = "3333333333333333333333333333333333333333";
    assert_eq!(
        seen(SEMAPHORE_ACQUIRE, &[fifth, "5000", "3", "0", waiter]),
        name(&[other, TOKEN, fourth])
    );
    run(&c, 0, &["HSET", "s", "t2", third, "x0", &ends]);
    run(&c, 0, &["DEL", "s:waiters"]);
    // Another number of permits: refused, naming the semaphore's.
    match eval(
        &c,
        SEMAPHORE_ACQUIRE,
        &["s"],
        &[fourth, "5000", "4", "0", ""],
    ) {
        Reply::Error(e) => assert_eq!(e, "PERMITS 3"),
        other => panic!("{other:?}"),
    }
    // Extending a slot that is not ours: 0, and nothing else changes.
    twice(
        &c,
        SEMAPHORE_EXTEND,
        &["s"],
        &[fourth, "8000", "0"],
        Reply::Int(0),
    );
    assert_eq!(hget(&c, "s", "t0"), other);
    // Releases: ours goes, once.
    assert_eq!(
        eval(&c, SEMAPHORE_RELEASE, &["s"], &[TOKEN, "0"]),
        Reply::Int(1)
    );
    assert_eq!(
        eval(&c, SEMAPHORE_RELEASE, &["s"], &[TOKEN, "0"]),
        Reply::Int(0)
    );
    // Our token kept slot 1 here, where the majority granted it slot 0
    // (another's here): extending slot 0 lets slot 1 go, and answers 0.
    run(&c, 0, &["HSET", "s", "t1", TOKEN, "x1", "99999999999999"]);
    twice(
        &c,
        SEMAPHORE_EXTEND,
        &["s"],
        &[TOKEN, "8000", "0"],
        Reply::Int(0),
    );
    assert_eq!(run(&c, 0, &["HEXISTS", "s", "t1"]), Reply::Int(0));
    assert!(
        pttl(&c, 0, "s") <= 5_000,
        "the key lives as its latest slot"
    );
    // A slot past its expiry is free, though its fields are still there.
    let now_ms = node_time_ms(&c, 0) as i64;
    run(&c, 0, &["HSET", "s", "x0", &(now_ms - 1000).to_string()]);
    assert_eq!(
        slot(eval(
            &c,
            SEMAPHORE_ACQUIRE,
            &["s"],
            &[fourth, "5000", "3", "2", ""]
        ))
        .0,
        0
    );
    // Other kinds see another holder; the semaphore sees theirs.
    assert_eq!(
        eval(&c, MUTEX_ACQUIRE, &["s"], &[TOKEN, "5000", ""]),
        Reply::Int(0)
    );
    assert_eq!(
        eval(&c, MUTEX_RELEASE, &["s"], &[TOKEN, "0"]),
        Reply::Int(-1)
    );
    assert_eq!(
        eval(&c, MUTEX_ACQUIRE, &["m"], &[TOKEN, "5000", ""]),
        Reply::Int(1)
    );
    assert_eq!(
        eval(
            &c,
            SEMAPHORE_ACQUIRE,
            &["m"],
            &[other, "5000", "3", "0", ""]
        ),
        Reply::Int(0)
    );
    assert_eq!(
        eval(&c, SEMAPHORE_RELEASE, &["m"], &[other, "0"]),
        Reply::Int(-1)
    );
    // An operator's clear by token lets one permit go; the last takes the
    // key with it.
    for token in [third, fourth] {
        assert_eq!(
            eval(&c, ADMIN_CLEAR, &["s"], &[token]),
            Reply::Int(1),
            "{token}"
        );
    }
    assert_eq!(run(&c, 0, &["EXISTS", "s"]), Reply::Int(0));
}

/// Whether a refused waiter was told of readers: `readers:<digest of
/// their tokens>`.
fn is_readers(seen: &Reply) -> bool {
    matches!(seen, Reply::Bulk(Some(name)) if name.starts_with(b"readers:"))
}

/// A reader's scripts run twice change nothing the second time (one share,
/// never shortened, let go once); a writer's key keeps readers out and the
/// readers' key keeps a writer out; a waiting writer's intent turns new
/// readers away, and taking the key clears it.
#[test]
fn a_resent_share_is_one_share_and_writers_and_readers_exclude_each_other() {
    let c = servers(1);
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    twice(&c, READ, &["d"], &[TOKEN, "5000", ""], Reply::Int(1));
    run(&c, 0, &["HSET", "d", TOKEN, "99999999999999"]);
    twice(&c, READ, &["d"], &[TOKEN, "5000", ""], Reply::Int(1));
    assert_eq!(hget(&c, "d", TOKEN), "99999999999999", "not shortened");
    twice(&c, READ, &["d"], &[other, "5000", ""], Reply::Int(1));
    twice(&c, READ_EXTEND, &["d"], &[other, "8000"], Reply::Int(1));
    // A writer is kept out, and, waiting, leaves its intent: a new reader
    // is turned away, the ones in stay.
    let writer = "0000000000000001:abcd:1";
    match eval(&c, MUTEX_ACQUIRE, &["d"], &[TOKEN, "5000", writer]) {
        Reply::Array(Some(seen)) => assert!(is_readers(&seen[0]), "{seen:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(get(&c, 0, "d:intent").as_deref(), Some(writer));
    let third = "1111111111111111111111111111111111111111";
    assert_eq!(eval(&c, READ, &["d"], &[third, "5000", ""]), Reply::Int(0));
    twice(&c, READ, &["d"], &[other, "5000", ""], Reply::Int(1));
    // The readers go (each once); the last one's release frees the key.
    assert_eq!(eval(&c, READ_RELEASE, &["d"], &[TOKEN, "0"]), Reply::Int(1));
    assert_eq!(eval(&c, READ_RELEASE, &["d"], &[TOKEN, "0"]), Reply::Int(0));
    assert_eq!(eval(&c, READ_RELEASE, &["d"], &[other, "0"]), Reply::Int(1));
    assert_eq!(run(&c, 0, &["EXISTS", "d"]), Reply::Int(0));
    // The writer takes it, and its intent goes; readers are kept out by the
    // writer's key now.
    let wtoken = "2222222222222222222222222222222222222222";
    assert_eq!(
        eval(&c, MUTEX_ACQUIRE, &["d"], &[wtoken, "5000", writer]),
        Reply::Int(1)
    );
    assert_eq!(run(&c, 0, &["EXISTS", "d:intent"]), Reply::Int(0));
    assert_eq!(eval(&c, READ, &["d"], &[third, "5000", ""]), Reply::Int(0));
    assert_eq!(
        eval(&c, READ_EXTEND, &["d"], &[third, "5000"]),
        Reply::Int(-1)
    );
    assert_eq!(
        eval(&c, READ_RELEASE, &["d"], &[third, "0"]),
        Reply::Int(-1)
    );
}

/// The intent is only what a waiting writer wrote: a lock of another use
/// named `<key>:intent` turns no reader away and breaks no waiter; a writer
/// kept out by long readers is told to come back before its intent lapses;
/// shares whose readers vanished are purged when another reader comes.
#[test]
fn the_intent_is_a_writers_only_and_vanished_shares_are_purged() {
    let c = servers(1);
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    // A mutex and a reentrant hash named "e:intent", of other users.
    assert_eq!(
        eval(&c, MUTEX_ACQUIRE, &["e:intent"], &[other, "5000", ""]),
        Reply::Int(1)
    );
    assert_eq!(eval(&c, READ, &["e"], &[TOKEN, "30000", ""]), Reply::Int(1));
    run(&c, 0, &["DEL", "e:intent"]);
    run(
        &c,
        0,
        &["HSET", "e:intent", "o", "someone", "i", other, other, "1"],
    );
    let writer = "0000000000000001:abcd:1";
    match eval(&c, MUTEX_ACQUIRE, &["e"], &[other, "5000", writer]) {
        Reply::Array(Some(seen)) => {
            assert!(is_readers(&seen[0]), "{seen:?}");
        }
        other => panic!("{other:?}"),
    }
    // Its intent was not written over the hash, and readers still get in.
    assert_eq!(hget(&c, "e:intent", "o"), "someone");
    let third = "1111111111111111111111111111111111111111";
    assert_eq!(eval(&c, READ, &["e"], &[third, "30000", ""]), Reply::Int(1));
    run(&c, 0, &["DEL", "e:intent"]);
    // Readers of 30 s: the writer's intent lives 11 s, and the writer is
    // told to come back within 10.
    match eval(&c, MUTEX_ACQUIRE, &["e"], &[other, "5000", writer]) {
        Reply::Array(Some(seen)) => {
            assert!(
                matches!(seen[1], Reply::Int(ms) if ms <= 10_000),
                "{seen:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(pttl(&c, 0, "e:intent") > 10_000);
    run(&c, 0, &["DEL", "e:intent", "e:waiters"]);
    // A share whose reader vanished (expired a second ago) goes when the
    // next reader comes.
    let past = (node_time_ms(&c, 0) - 1_000).to_string();
    run(
        &c,
        0,
        &[
            "HSET",
            "e",
            "2222222222222222222222222222222222222222",
            &past,
        ],
    );
    let fourth = "3333333333333333333333333333333333333333";
    assert_eq!(
        eval(&c, READ, &["e"], &[fourth, "30000", ""]),
        Reply::Int(1)
    );
    assert_eq!(
        run(
            &c,
            0,
            &["HEXISTS", "e", "2222222222222222222222222222222222222222"]
        ),
        Reply::Int(0)
    );
}

/// The election's scripts, each run twice as a resend would, and what
/// keeps a record the leader's: a late announcement of an earlier
/// candidate leaves the new leader's record alone; a record beside another
/// token's key names nobody; an older renewal never puts back an older
/// value; the record lives as long as the key and goes with it.
#[test]
fn election_records_are_the_key_holders_only_and_never_go_back() {
    let c = servers(1);
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    let record = |field: &str| hget(&c, "e:leader", field);
    run(&c, 0, &["SET", "e", TOKEN, "PX", "30000"]);
    twice(
        &c,
        ANNOUNCE,
        &["e", "e:fence"],
        &[TOKEN, "7", "b", "vb", "0"],
        Reply::Int(1),
    );
    assert_eq!(
        (record("t"), record("n"), record("f")),
        (TOKEN.into(), "b".into(), "7".into())
    );
    assert!(
        pttl(&c, 0, "e:leader") > 25_000,
        "the record lives as the key does"
    );
    // An earlier candidate's announcement, late: refused, nothing written.
    assert_eq!(
        eval(
            &c,
            ANNOUNCE,
            &["e", "e:fence"],
            &[other, "5", "a", "va", "0"]
        ),
        Reply::Int(-1)
    );
    assert_eq!((record("t"), record("f")), (TOKEN.into(), "7".into()));
    // Renewals: a newer value wins, an older one is not put back, and
    // twice is once.
    twice(
        &c,
        LEADER_EXTEND,
        &["e"],
        &[TOKEN, "60000", "b", "v2", "7", "2"],
        Reply::Int(1),
    );
    assert_long(&c, &["e", "e:leader"]);
    assert_eq!(
        eval(
            &c,
            LEADER_EXTEND,
            &["e"],
            &[TOKEN, "60000", "b", "v1", "7", "1"]
        ),
        Reply::Int(1)
    );
    assert_eq!((record("v"), record("s")), ("v2".into(), "2".into()));
    let Reply::Array(Some(seen)) = eval(&c, LEADER, &["e"], &[]) else {
        panic!("leader.lua answers an array for a held key")
    };
    assert_eq!(seen[2], Reply::Bulk(Some(b"b".to_vec())));
    // Another token's key beside this record: the record names nobody.
    run(&c, 0, &["SET", "e", other, "PX", "30000"]);
    let Reply::Array(Some(seen)) = eval(&c, LEADER, &["e"], &[]) else {
        panic!("leader.lua answers an array for a held key")
    };
    assert_eq!(
        seen[2],
        Reply::Bulk(None),
        "a stale record named the holder"
    );
    assert_eq!(
        eval(
            &c,
            LEADER_EXTEND,
            &["e"],
            &[TOKEN, "60000", "b", "v3", "7", "3"]
        ),
        Reply::Int(-1)
    );
    assert_eq!(
        record("v"),
        "v2",
        "a renewal of a lost leader wrote the record"
    );
    // A resignation takes the record with the key; a resent one, nothing.
    run(&c, 0, &["SET", "e", TOKEN, "PX", "30000"]);
    assert_eq!(eval(&c, RESIGN, &["e"], &[TOKEN, "1"]), Reply::Int(1));
    assert_eq!(eval(&c, RESIGN, &["e"], &[TOKEN, "1"]), Reply::Int(0));
    assert_eq!(holders(&c, &[0], "e") + holders(&c, &[0], "e:leader"), 0);
    assert_eq!(eval(&c, LEADER, &["e"], &[]), Reply::Int(0));
}

/// A raw subscriber of one channel on node 0: hears wake-ups as a waiter's
/// client does.
struct Listening {
    reader: std::io::BufReader<std::net::TcpStream>,
    channel: String,
}

impl Listening {
    fn subscribe(c: &LocalServers, channel: &str) -> Listening {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", c.port(0))).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{channel}\r\n",
            channel.len()
        )
        .unwrap();
        let mut listening = Listening {
            reader: std::io::BufReader::new(stream),
            channel: channel.to_owned(),
        };
        // *3, $9, subscribe, $n, the channel, :1.
        let confirmation = listening.lines(6);
        assert_eq!(confirmation[5], ":1", "{confirmation:?}");
        listening
    }

    fn lines(&mut self, n: usize) -> Vec<String> {
        use std::io::BufRead;
        (0..n)
            .map(|_| {
                let mut line = String::new();
                self.reader.read_line(&mut line).unwrap();
                line.trim_end().to_owned()
            })
            .collect()
    }

    /// What was published on the channel since the last look, up to a
    /// marker published now: deterministic, since a node delivers one
    /// connection's messages in order.
    fn heard(&mut self, c: &LocalServers) -> Vec<String> {
        let marker = "--marker--";
        run(c, 0, &["PUBLISH", &self.channel, marker]);
        let mut heard = Vec::new();
        // *3, $7, message, $n, the channel, $m, the payload.
        for _ in 0..100 {
            let payload = self.lines(7).pop().unwrap();
            if payload == marker {
                return heard;
            }
            heard.push(payload);
        }
        panic!("no marker among {heard:?}")
    }
}

/// A queued reader that joins the readers wakes the next waiter (a reader
/// that may share now), with a name that is no holder's, `joined:<token>`,
/// which the waiting client knows as such (`Tally::passed`).
#[test]
fn a_reader_that_joins_wakes_the_next_waiter_by_a_name_that_is_no_holders() {
    let c = servers(1);
    let (aa, bb) = ("0000000000000001:aa:1", "0000000000000002:bb:1");
    let mut listening = Listening::subscribe(&c, "d:wake:bb");
    run(&c, 0, &["ZADD", "d:waiters", "0", aa, "0", bb]);
    assert_eq!(eval(&c, READ, &["d"], &[TOKEN, "5000", aa]), Reply::Int(1));
    assert_eq!(listening.heard(&c), [format!("{bb} joined:{TOKEN}")]);
}

/// A pass-on (a wake-up reached a wait that had ended) and a leave (a
/// waiter gave up) wake the next waiter whenever the lock has room for it,
/// in every layout: a free key; a semaphore with a slot free (released, or
/// expired) though other slots are held; readers whom no writer's intent
/// keeps others from. Never where there is no room: an exclusive or a
/// reentrant holder, a full semaphore, readers behind an intent. (Woken
/// only where the key was gone, the waiter behind a dropped one slept out
/// its timer while a permit was free.)
#[test]
fn a_pass_on_or_a_leave_wakes_the_next_waiter_whenever_the_lock_has_room() {
    let c = servers(1);
    // `bb` waits; `aa`, ahead of it, is the wait that ended or leaves.
    let (aa, bb) = ("0000000000000001:aa:1", "0000000000000002:bb:1");
    let mut listening = Listening::subscribe(&c, "k:wake:bb");
    type Setup = fn(&LocalServers);
    let cases: [(&str, Setup, bool); 9] = [
        ("free", |_| {}, true),
        (
            "exclusive",
            |c| {
                run(c, 0, &["SET", "k", TOKEN, "PX", "60000"]);
            },
            false,
        ),
        (
            "reentrant",
            |c| {
                let reply = eval(c, REENTRANT_ACQUIRE, &["k"], &["job", TOKEN, "60000", ""]);
                assert_eq!(reply, Reply::Int(1));
            },
            false,
        ),
        (
            "semaphore, a slot free",
            |c| {
                slot(eval(
                    c,
                    SEMAPHORE_ACQUIRE,
                    &["k"],
                    &[TOKEN, "60000", "2", "0", ""],
                ));
            },
            true,
        ),
        (
            "semaphore, full",
            |c| {
                for token in [TOKEN, "fedcba9876543210fedcba9876543210fedcba98"] {
                    slot(eval(
                        c,
                        SEMAPHORE_ACQUIRE,
                        &["k"],
                        &[token, "60000", "2", "0", ""],
                    ));
                }
            },
            false,
        ),
        (
            "semaphore, a slot expired",
            |c| {
                for token in [TOKEN, "fedcba9876543210fedcba9876543210fedcba98"] {
                    slot(eval(
                        c,
                        SEMAPHORE_ACQUIRE,
                        &["k"],
                        &[token, "60000", "2", "0", ""],
                    ));
                }
                let past = (node_time_ms(c, 0) - 1_000).to_string();
                run(c, 0, &["HSET", "k", "x1", &past]);
            },
            true,
        ),
        (
            "readers",
            |c| {
                assert_eq!(eval(c, READ, &["k"], &[TOKEN, "60000", ""]), Reply::Int(1));
            },
            true,
        ),
        (
            "readers, another writer's intent",
            |c| {
                assert_eq!(eval(c, READ, &["k"], &[TOKEN, "60000", ""]), Reply::Int(1));
                run(
                    c,
                    0,
                    &["SET", "k:intent", "0000000000000000:cc:1", "PX", "60000"],
                );
            },
            false,
        ),
        (
            "readers, the leaver's intent",
            |c| {
                assert_eq!(eval(c, READ, &["k"], &[TOKEN, "60000", ""]), Reply::Int(1));
                run(
                    c,
                    0,
                    &["SET", "k:intent", "0000000000000001:aa:1", "PX", "60000"],
                );
            },
            true,
        ),
    ];
    for (name, setup, room) in cases {
        for script in ["pass-on", "leave"] {
            run(&c, 0, &["FLUSHALL"]);
            setup(&c);
            run(&c, 0, &["ZADD", "k:waiters", "0", bb]);
            let reply = if script == "pass-on" {
                eval(&c, PASS_ON, &["k"], &["tok"])
            } else {
                run(&c, 0, &["ZADD", "k:waiters", "0", aa]);
                eval(&c, LEAVE, &["k"], &[aa])
            };
            assert_eq!(reply, Reply::Int(1), "{name}, {script}");
            let heard = listening.heard(&c);
            // The leaver's own intent only matters to a leave: a pass-on
            // finds it there, keeping readers out.
            let expected = room && !(script == "pass-on" && name.ends_with("leaver's intent"));
            if expected {
                assert_eq!(heard.len(), 1, "{name}, {script}: woke nobody");
                // A pass-on carries the wake-up's token on; a leave is
                // named `leave:<leaver>`, a name the waiting client knows
                // as no holder's (`Tally::passed`).
                let token = match script {
                    "pass-on" => "tok".to_owned(),
                    _ => format!("leave:{aa}"),
                };
                assert_eq!(heard[0], format!("{bb} {token}"), "{name}, {script}");
            } else {
                assert!(
                    heard.is_empty(),
                    "{name}, {script}: woke {heard:?} with no room"
                );
            }
        }
    }
}

/// `MAX_TTL` in ms, as the client sends it.
const MAX_TTL_MS: &str = "4611686018427387903";

/// Whether `text` is a whole number as Redis reads one: digits only.
fn is_whole(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// Every number a script hands Redis is a whole number, written out, at
/// any TTL a key can have: Lua's doubles went to Redis as `%.17g` text,
/// `4.6116860184273879e+18` for a queue behind a lock held for `MAX_TTL`,
/// which `PEXPIRE` refused, after the `ZADD` had made the queue: a queue
/// with no expiry, and an error for the waiter. Each kind at `MAX_TTL`
/// with a waiter behind it; a semaphore's and a reader's expiries in their
/// hashes; an election's record; and a lock key that some other client
/// gave the very longest expiry Redis takes, whose queue's life (its PTTL
/// and 5 s) Redis would refuse as past the end of its clock, and which is
/// cut to 2^62 ms.
#[test]
fn every_number_a_script_hands_redis_is_whole_at_any_ttl() {
    let c = servers(1);
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    let waiter = "0000000000000001:aa:1";
    let queued = |c: &LocalServers, key: &str| {
        let queue = format!("{key}:waiters");
        assert_eq!(
            run(c, 0, &["ZSCORE", &queue, waiter]),
            Reply::Bulk(Some(b"0".to_vec())),
            "{key}: the waiter is not queued"
        );
        let left = pttl(c, 0, &queue);
        assert!(
            left > 4_611_686_000_000_000_000 && left <= 4_611_686_018_427_387_904,
            "{key}: the queue's PTTL is {left}"
        );
    };
    let refused = |reply: Reply, key: &str| {
        assert!(
            matches!(&reply, Reply::Array(Some(seen)) if seen.len() == 2),
            "{key}: {reply:?}"
        );
    };
    // Exclusive, and a set of keys.
    assert_eq!(
        eval(&c, MUTEX_ACQUIRE, &["m", "n"], &[TOKEN, MAX_TTL_MS, ""]),
        Reply::Int(1)
    );
    refused(
        eval(&c, MUTEX_ACQUIRE, &["m", "n"], &[other, MAX_TTL_MS, waiter]),
        "m",
    );
    queued(&c, "m");
    // Reentrant.
    assert_eq!(
        eval(
            &c,
            REENTRANT_ACQUIRE,
            &["r"],
            &["one", TOKEN, MAX_TTL_MS, ""]
        ),
        Reply::Int(1)
    );
    refused(
        eval(
            &c,
            REENTRANT_ACQUIRE,
            &["r"],
            &["two", other, MAX_TTL_MS, waiter],
        ),
        "r",
    );
    queued(&c, "r");
    // Fenced.
    assert!(matches!(
        eval(
            &c,
            FENCED_ACQUIRE,
            &["f", "f:fence"],
            &[TOKEN, MAX_TTL_MS, "", "0"]
        ),
        Reply::Array(Some(_))
    ));
    refused(
        eval(
            &c,
            FENCED_ACQUIRE,
            &["f", "f:fence"],
            &[other, MAX_TTL_MS, waiter, "0"],
        ),
        "f",
    );
    queued(&c, "f");
    // A semaphore: its expiries written out in full.
    slot(eval(
        &c,
        SEMAPHORE_ACQUIRE,
        &["s"],
        &[TOKEN, MAX_TTL_MS, "1", "0", ""],
    ));
    assert!(is_whole(&hget(&c, "s", "x0")), "{}", hget(&c, "s", "x0"));
    assert_eq!(hget(&c, "s", "k"), "1");
    refused(
        eval(
            &c,
            SEMAPHORE_ACQUIRE,
            &["s"],
            &[other, MAX_TTL_MS, "1", "0", waiter],
        ),
        "s",
    );
    queued(&c, "s");
    assert_eq!(
        eval(&c, SEMAPHORE_EXTEND, &["s"], &[TOKEN, MAX_TTL_MS, "0"]),
        Reply::Int(1)
    );
    assert!(is_whole(&hget(&c, "s", "x0")), "{}", hget(&c, "s", "x0"));
    // Readers, and a writer waiting for them: its intent is short-lived.
    assert_eq!(
        eval(&c, READ, &["d"], &[TOKEN, MAX_TTL_MS, ""]),
        Reply::Int(1)
    );
    assert_eq!(
        eval(&c, READ_EXTEND, &["d"], &[TOKEN, MAX_TTL_MS]),
        Reply::Int(1)
    );
    assert!(is_whole(&hget(&c, "d", TOKEN)), "{}", hget(&c, "d", TOKEN));
    refused(
        eval(&c, MUTEX_ACQUIRE, &["d"], &[other, MAX_TTL_MS, waiter]),
        "d",
    );
    queued(&c, "d");
    let intent = pttl(&c, 0, "d:intent");
    assert!(
        (10_000..=11_000).contains(&intent),
        "the intent's PTTL is {intent}"
    );
    // A writer, and a reader waiting for it.
    assert_eq!(
        eval(&c, MUTEX_ACQUIRE, &["w"], &[TOKEN, MAX_TTL_MS, ""]),
        Reply::Int(1)
    );
    refused(eval(&c, READ, &["w"], &[other, MAX_TTL_MS, waiter]), "w");
    queued(&c, "w");
    // An election's record lives as long as its leader's key.
    run(&c, 0, &["SET", "e", TOKEN, "PX", MAX_TTL_MS]);
    assert_eq!(
        eval(
            &c,
            ANNOUNCE,
            &["e", "e:fence"],
            &[TOKEN, "7", "b", "vb", "0"]
        ),
        Reply::Int(1)
    );
    assert_eq!(
        eval(
            &c,
            LEADER_EXTEND,
            &["e"],
            &[TOKEN, MAX_TTL_MS, "b", "v2", "7", "1"]
        ),
        Reply::Int(1)
    );
    let record = pttl(&c, 0, "e:leader");
    assert!(
        record > 4_611_686_000_000_000_000,
        "the record's PTTL is {record}"
    );
    // The longest expiry Redis takes, from another client: i64::MAX ms
    // from the Unix epoch, less a margin for the node's clock.
    let longest = i64::MAX as u64 - node_time_ms(&c, 0) - 2_000;
    run(&c, 0, &["SET", "x", other, "PX", &longest.to_string()]);
    refused(
        eval(&c, MUTEX_ACQUIRE, &["x"], &[TOKEN, MAX_TTL_MS, waiter]),
        "x",
    );
    let left = pttl(&c, 0, "x:waiters");
    assert!(
        left > 4_611_686_000_000_000_000 && left <= 4_611_686_018_427_387_904,
        "the queue's PTTL is {left}"
    );
}

/// The history beside an election's record: each new leadership recorded on
/// a node is noted there (once, however often its announcement is resent),
/// its latest value kept with it; only the latest 32 by term are kept, and
/// the highest term dropped is said; it has no TTL; `observe.lua` lists
/// the leaderships above a term, with who leads.
#[test]
fn an_election_history_keeps_the_latest_leaderships_and_says_what_it_dropped() {
    let c = servers(1);
    let token = |i: u64| format!("{i:040x}");
    let observe = |above: &str| -> Vec<Reply> {
        match eval(&c, OBSERVE, &["h"], &[above]) {
            Reply::Array(Some(items)) => items,
            other => panic!("observe.lua: {other:?}"),
        }
    };
    for i in 1..=40u64 {
        let (t, term) = (token(i), (10 * i).to_string());
        run(&c, 0, &["SET", "h", &t, "PX", "30000"]);
        twice(
            &c,
            ANNOUNCE,
            &["h", "h:fence"],
            &[&t, &term, &format!("c {i}"), "v 0", "0"],
            Reply::Int(1),
        );
        if i == 40 {
            // A proclamation: the history keeps the latest value.
            twice(
                &c,
                LEADER_EXTEND,
                &["h"],
                &[&t, "30000", &format!("c {i}"), "v 1", &term, "1"],
                Reply::Int(1),
            );
        }
        run(&c, 0, &["DEL", "h"]);
    }
    assert_eq!(pttl(&c, 0, "h:terms"), -1, "the history has no TTL");
    // 40 leaderships, 32 kept: terms 90..400; 80 dropped.
    let all = observe("0");
    assert_eq!(all[0], Reply::Int(0), "no leader now");
    assert_eq!(all[1], Reply::Bulk(Some(b"80".to_vec())));
    assert_eq!(all.len(), 2 + 2 * 32);
    let above = observe("380");
    assert_eq!(above.len(), 2 + 2 * 2, "terms 390 and 400: {above:?}");
    let mut fields: Vec<(String, String)> = above[2..]
        .chunks(2)
        .map(|p| match p {
            [Reply::Bulk(Some(f)), Reply::Bulk(Some(v))] => (
                String::from_utf8(f.clone()).unwrap(),
                String::from_utf8(v.clone()).unwrap(),
            ),
            other => panic!("{other:?}"),
        })
        .collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            (format!("390 {}", token(39)), "0 4 c 39v 0".to_owned()),
            (format!("400 {}", token(40)), "1 4 c 40v 1".to_owned()),
        ]
    );
    // With a leader: who leads comes first, as leader.lua says it.
    run(&c, 0, &["SET", "h", &token(40), "PX", "30000"]);
    let Reply::Array(Some(seen)) = &observe("400")[0] else {
        panic!("observe.lua names the key's holder")
    };
    assert_eq!(seen[0], Reply::Bulk(Some(token(40).into_bytes())));
}

/// A release announces the holder under the name its waiters were told,
/// in every layout: the waiter whose next attempt raced the release on
/// some nodes (and found the holder still there) tells by that name that
/// its release is under way, and tries again at once. Readers and a
/// semaphore's permits were announced by the releasing hold's own token
/// while their waiters were told `readers` or `permits:<k>:<digest>`: such
/// a waiter took the holder for one still there and slept out its PTTL,
/// its turn spent, a writer's intent keeping readers out meanwhile (found
/// by the chaos scenario `kinds_on_one_name`: stretches of 1 to 3 s with
/// the lock free).
#[test]
fn a_release_announces_the_holder_by_the_name_its_waiters_were_told() {
    let c = servers(1);
    let waiter = "0000000000000002:bb:1";
    let mut listening = Listening::subscribe(&c, "k:wake:bb");
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    type Step = fn(&LocalServers);
    // Each case: how the holder takes the key, and how it lets go.
    let cases: [(&str, Step, Step); 5] = [
        (
            "exclusive",
            |c| {
                run(c, 0, &["SET", "k", TOKEN, "PX", "60000"]);
            },
            |c| assert_eq!(eval(c, MUTEX_RELEASE, &["k"], &[TOKEN, "1"]), Reply::Int(1)),
        ),
        (
            "reentrant",
            |c| {
                let reply = eval(c, REENTRANT_ACQUIRE, &["k"], &["job", TOKEN, "60000", ""]);
                assert_eq!(reply, Reply::Int(1));
            },
            |c| {
                let reply = eval(c, REENTRANT_RELEASE, &["k"], &["job", TOKEN, "1"]);
                assert_eq!(reply, Reply::Int(1));
            },
        ),
        (
            "semaphore",
            |c| {
                slot(eval(
                    c,
                    SEMAPHORE_ACQUIRE,
                    &["k"],
                    &[TOKEN, "60000", "1", "0", ""],
                ));
            },
            |c| {
                let reply = eval(c, SEMAPHORE_RELEASE, &["k"], &[TOKEN, "1"]);
                assert_eq!(reply, Reply::Int(1));
            },
        ),
        (
            "a reader",
            |c| {
                assert_eq!(eval(c, READ, &["k"], &[TOKEN, "60000", ""]), Reply::Int(1));
            },
            |c| assert_eq!(eval(c, READ_RELEASE, &["k"], &[TOKEN, "1"]), Reply::Int(1)),
        ),
        (
            "the last of two readers",
            |c| {
                for token in [TOKEN, "fedcba9876543210fedcba9876543210fedcba98"] {
                    assert_eq!(eval(c, READ, &["k"], &[token, "60000", ""]), Reply::Int(1));
                }
                let first = "fedcba9876543210fedcba9876543210fedcba98";
                assert_eq!(eval(c, READ_RELEASE, &["k"], &[first, "1"]), Reply::Int(1));
            },
            |c| assert_eq!(eval(c, READ_RELEASE, &["k"], &[TOKEN, "1"]), Reply::Int(1)),
        ),
    ];
    for (name, hold, release) in cases {
        run(&c, 0, &["FLUSHALL"]);
        hold(&c);
        // The waiter is a mutex's attempt: kept out by every layout.
        let told = match eval(&c, MUTEX_ACQUIRE, &["k"], &[other, "5000", waiter]) {
            Reply::Array(Some(seen)) => match &seen[0] {
                Reply::Bulk(Some(name)) => String::from_utf8(name.clone()).unwrap(),
                seen => panic!("{name}: told {seen:?}"),
            },
            reply => panic!("{name}: {reply:?}"),
        };
        assert!(listening.heard(&c).is_empty(), "{name}");
        release(&c);
        assert_eq!(
            listening.heard(&c),
            [format!("{waiter} {told}")],
            "{name}: the release was announced by another name than the waiters were told"
        );
    }
}

/// What node 0 holds of the lock `k`, for comparing two runs: the key's
/// type and value, its life in 5 s steps (-1: none, -2: no key), the queue
/// and the intent.
fn mutex_state(c: &LocalServers) -> Vec<String> {
    let text = |reply: Reply| format!("{reply:?}");
    let life = match pttl(c, 0, "k") {
        ms if ms < 0 => ms,
        ms => (ms + 2_500) / 5_000,
    };
    vec![
        text(run(c, 0, &["TYPE", "k"])),
        match run(c, 0, &["TYPE", "k"]) {
            Reply::Status(t) if t == "hash" => text(run(c, 0, &["HGETALL", "k"])),
            _ => text(run(c, 0, &["GET", "k"])),
        },
        life.to_string(),
        text(run(c, 0, &["ZRANGE", "k:waiters", "0", "-1"])),
        text(run(c, 0, &["GET", "k:intent"])),
    ]
}

/// The mutex's release and extension answer every case their fast path
/// takes exactly as their whole script (`slow`) does, with the same writes
/// and wake-ups, and leave every other case to it: (a) our key, no waiters
/// (fast); (b) waiters queued: woken by `slow`; (c) a writer's intent:
/// `slow`; (d) a reentrant lock's hash: -1 and nothing changed, no error
/// (`slow`); (e) no key: 0; (f) another token: -1 (fast). Which path ran
/// is told by the reads (`GET`s): the fast path reads the key once, as the
/// whole script does, and `slow` after it once more.
#[test]
fn the_mutex_fast_paths_agree_with_the_whole_scripts() {
    let c = servers(1);
    let waiter = "0000000000000002:bb:1";
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    let mut listening = Listening::subscribe(&c, "k:wake:bb");
    type Setup = fn(&LocalServers, &str, &str);
    let ours: Setup = |c, _, _| {
        run(c, 0, &["SET", "k", TOKEN, "PX", "1000"]);
    };
    let queued: Setup = |c, waiter, _| {
        run(c, 0, &["SET", "k", TOKEN, "PX", "1000"]);
        run(c, 0, &["ZADD", "k:waiters", "0", waiter]);
        run(c, 0, &["PEXPIRE", "k:waiters", "60000"]);
    };
    let intent: Setup = |c, waiter, _| {
        run(c, 0, &["SET", "k", TOKEN, "PX", "1000"]);
        run(c, 0, &["SET", "k:intent", waiter, "PX", "60000"]);
    };
    let hash: Setup = |c, _, _| {
        let reply = eval(c, REENTRANT_ACQUIRE, &["k"], &["job", TOKEN, "60000", ""]);
        assert_eq!(reply, Reply::Int(1));
    };
    let missing: Setup = |_, _, _| {};
    let another: Setup = |c, _, other| {
        run(c, 0, &["SET", "k", other, "PX", "60000"]);
    };
    let persistent: Setup = |c, _, _| {
        run(c, 0, &["SET", "k", TOKEN]);
    };
    let long: Setup = |c, _, _| {
        run(c, 0, &["SET", "k", TOKEN, "PX", "120000"]);
    };
    let woken = vec![format!("{waiter} {TOKEN}")];
    // Case, setup, scripts (with the fast path, without), arguments, the
    // reply, whether the fast path answers, what the waiter hears.
    type Case<'a> = (
        &'a str,
        Setup,
        [&'a str; 2],
        [&'a str; 2],
        i64,
        bool,
        Vec<String>,
    );
    let cases: Vec<Case> = vec![
        (
            "release (a) ours",
            ours,
            [MUTEX_RELEASE, MUTEX_RELEASE_SLOW],
            [TOKEN, "1"],
            1,
            true,
            vec![],
        ),
        (
            "release (b) waiters",
            queued,
            [MUTEX_RELEASE, MUTEX_RELEASE_SLOW],
            [TOKEN, "1"],
            1,
            false,
            woken.clone(),
        ),
        (
            "release (b') waiters, unannounced",
            queued,
            [MUTEX_RELEASE, MUTEX_RELEASE_SLOW],
            [TOKEN, "0"],
            1,
            true,
            vec![],
        ),
        (
            "release (c) intent",
            intent,
            [MUTEX_RELEASE, MUTEX_RELEASE_SLOW],
            [TOKEN, "1"],
            1,
            false,
            vec![],
        ),
        (
            "release (d) a hash",
            hash,
            [MUTEX_RELEASE, MUTEX_RELEASE_SLOW],
            [TOKEN, "1"],
            -1,
            false,
            vec![],
        ),
        (
            "release (e) missing",
            missing,
            [MUTEX_RELEASE, MUTEX_RELEASE_SLOW],
            [TOKEN, "1"],
            0,
            true,
            vec![],
        ),
        (
            "release (f) another",
            another,
            [MUTEX_RELEASE, MUTEX_RELEASE_SLOW],
            [TOKEN, "1"],
            -1,
            true,
            vec![],
        ),
        (
            "extend (a) ours",
            ours,
            [MUTEX_EXTEND, MUTEX_EXTEND_SLOW],
            [TOKEN, "60000"],
            1,
            true,
            vec![],
        ),
        (
            "extend (a) ours, no expiry",
            persistent,
            [MUTEX_EXTEND, MUTEX_EXTEND_SLOW],
            [TOKEN, "60000"],
            1,
            true,
            vec![],
        ),
        (
            "extend (a) ours, longer",
            long,
            [MUTEX_EXTEND, MUTEX_EXTEND_SLOW],
            [TOKEN, "60000"],
            1,
            true,
            vec![],
        ),
        (
            "extend (b) waiters",
            queued,
            [MUTEX_EXTEND, MUTEX_EXTEND_SLOW],
            [TOKEN, "60000"],
            1,
            true,
            vec![],
        ),
        (
            "extend (c) intent",
            intent,
            [MUTEX_EXTEND, MUTEX_EXTEND_SLOW],
            [TOKEN, "60000"],
            1,
            true,
            vec![],
        ),
        (
            "extend (d) a hash",
            hash,
            [MUTEX_EXTEND, MUTEX_EXTEND_SLOW],
            [TOKEN, "60000"],
            -1,
            false,
            vec![],
        ),
        (
            "extend (e) missing",
            missing,
            [MUTEX_EXTEND, MUTEX_EXTEND_SLOW],
            [TOKEN, "60000"],
            0,
            true,
            vec![],
        ),
        (
            "extend (f) another",
            another,
            [MUTEX_EXTEND, MUTEX_EXTEND_SLOW],
            [TOKEN, "60000"],
            -1,
            true,
            vec![],
        ),
    ];
    for (name, setup, scripts, args, reply, fast, heard) in cases {
        let mut seen = Vec::new();
        for script in scripts {
            run(&c, 0, &["FLUSHALL"]);
            setup(&c, waiter, other);
            let before = mutex_state(&c);
            run(&c, 0, &["CONFIG", "RESETSTAT"]);
            assert_eq!(eval(&c, script, &["k"], &args), Reply::Int(reply), "{name}");
            let reads = command_stat(&c, 0, "get", "calls");
            let errors = command_stat(&c, 0, "eval", "failed_calls");
            assert_eq!(errors, 0, "{name}");
            if reply != 1 {
                assert_eq!(mutex_state(&c), before, "{name}: changed");
            }
            seen.push((mutex_state(&c), listening.heard(&c), reads));
        }
        let [(state, woke, reads), (slow_state, slow_woke, slow_reads)] = &seen[..] else {
            unreachable!()
        };
        assert_eq!(
            state, slow_state,
            "{name}: the fast path left another state"
        );
        assert_eq!(woke, slow_woke, "{name}: the fast path woke otherwise");
        assert_eq!(woke, &heard, "{name}");
        assert_eq!(
            *reads - slow_reads,
            u64::from(!fast),
            "{name}: fast path {fast}"
        );
    }
}
