//! The test launcher itself: nodes answer, die, freeze, thaw, restart empty on
//! the same port, and are gone after drop.

use std::time::Duration;

use redquorum::local_servers::{LocalServers, Reply, command, command_with_timeout};

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

#[test]
fn nodes_answer_die_freeze_thaw_and_restart_empty() {
    let mut c = LocalServers::start(3).unwrap();
    assert_eq!(c.len(), 3);
    let mut ports: Vec<u16> = (0..3).map(|i| c.port(i)).collect();
    ports.dedup();
    assert_eq!(ports.len(), 3);
    for i in 0..3 {
        assert_eq!(
            command(c.port(i), &["PING"]).unwrap(),
            Reply::Status("PONG".into())
        );
        assert_eq!(c.url(i), format!("redis://127.0.0.1:{}", c.port(i)));
    }

    c.kill(0);
    assert_eq!(c.pid(0), None);
    assert!(command(c.port(0), &["PING"]).is_err());
    assert!(command(c.port(1), &["PING"]).is_ok());

    c.freeze(1);
    let frozen = command_with_timeout(c.port(1), &["PING"], Duration::from_millis(200));
    assert!(frozen.is_err(), "a frozen node answered: {frozen:?}");
    c.thaw(1);
    assert_eq!(
        command(c.port(1), &["PING"]).unwrap(),
        Reply::Status("PONG".into())
    );

    let port = c.port(2);
    command(port, &["SET", "k", "v"]).unwrap();
    c.restart(2).unwrap();
    assert_eq!(c.port(2), port);
    assert_eq!(command(port, &["GET", "k"]).unwrap(), Reply::Bulk(None));
    c.restart(0).unwrap();
    assert!(command(c.port(0), &["PING"]).is_ok());
}

#[test]
fn dropping_the_cluster_stops_every_node_even_frozen_ones() {
    let mut c = LocalServers::start(2).unwrap();
    c.freeze(1);
    let pids: Vec<u32> = (0..2).map(|i| c.pid(i).unwrap()).collect();
    assert!(pids.iter().all(|&p| alive(p)));
    drop(c);
    // Reaped by the drop, so the pids no longer exist.
    assert!(pids.iter().all(|&p| !alive(p)), "{pids:?}");
}

#[test]
fn extra_arguments_reach_every_node() {
    let c = LocalServers::start_with_args(2, &["--maxmemory-policy", "allkeys-lru"]).unwrap();
    for i in 0..2 {
        let reply = command(c.port(i), &["CONFIG", "GET", "maxmemory-policy"]).unwrap();
        let Reply::Array(Some(items)) = reply else {
            panic!("{reply:?}")
        };
        assert_eq!(items[1], Reply::Bulk(Some(b"allkeys-lru".to_vec())));
    }
}
