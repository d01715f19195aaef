//! Leader election, end to end: three candidates campaign for one
//! election; the leader works while it leads, fencing its writes with its
//! term; an observer prints every change. The first leader resigns (the
//! next one takes over at once), the second is paused past its TTL (the
//! third takes over once its key expires, and the paused one, when it
//! wakes, finds that it lost and that its late write is refused).
//!
//! ```text
//! cargo run --example leader          # starts five local redis-server processes and a storage node
//! ```

use std::time::Duration;

use redquorum::local_servers::LocalServers;
use redquorum::{Leadership, Observed, Redlock};

/// The storage side: write only with a term at least the highest seen.
const WRITE: &str = r"
if tonumber(ARGV[1]) < tonumber(redis.call('HGET', KEYS[1], 'term') or '0') then
  return 0
end
redis.call('HSET', KEYS[1], 'term', ARGV[1], 'value', ARGV[2])
return 1";

async fn write(
    storage: &mut redis::aio::MultiplexedConnection,
    leadership: &Leadership,
    value: &str,
) -> redis::RedisResult<bool> {
    redis::Script::new(WRITE)
        .key("schedule")
        .arg(leadership.term())
        .arg(value)
        .invoke_async(storage)
        .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = LocalServers::start(5)?;
    let storage_node = LocalServers::start(1)?;
    let redlock = Redlock::new(nodes.urls())?;
    let mut storage = redis::Client::open(storage_node.url(0))?
        .get_multiplexed_async_connection()
        .await?;
    let ttl = Duration::from_secs(1);

    // Every change of leader, as a majority of nodes agrees.
    let mut observer = redlock
        .observe("scheduler")
        .every(Duration::from_millis(100));
    tokio::spawn(async move {
        while let Some(change) = observer.next().await {
            match change {
                Observed::Leader(l) => println!(
                    "  observer: {} leads, term {}, at {:?}",
                    l.identity, l.term, l.value
                ),
                Observed::Vacant => println!("  observer: no leader"),
                Observed::Skipped { after, before } => {
                    println!(
                        "  observer: leaders between terms {after} and {before} may be missing"
                    )
                }
                _ => {}
            }
        }
    });

    let a = redlock
        .campaign("scheduler", "host-a", ttl)
        .value("10.0.0.1:8080")
        .await?;
    println!("host-a leads, term {}", a.term());
    assert!(write(&mut storage, &a, "from a").await?);

    // host-b runs in a process of its own (here, a thread with its own
    // runtime): when it leads, it stalls (a GC pause, swapping) for 2 s,
    // its TTL being 1 s — nothing of it runs, not even its renewals.
    let (urls, storage_url) = (nodes.urls(), storage_node.url(0));
    let host_b = std::thread::spawn(move || -> Result<(bool, bool), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let redlock = Redlock::new(urls).map_err(|e| e.to_string())?;
        let (b, mut storage) = rt
            .block_on(async {
                let b = redlock
                    .campaign("scheduler", "host-b", ttl)
                    .value("10.0.0.2:8080")
                    .await?;
                println!("host-b leads, term {}", b.term());
                let mut storage = redis::Client::open(storage_url)?
                    .get_multiplexed_async_connection()
                    .await?;
                assert!(write(&mut storage, &b, "from b").await?);
                println!("host-b is paused for 2 s");
                Ok::<_, Box<dyn std::error::Error>>((b, storage))
            })
            .map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_secs(2));
        // Awake: the check a leader makes before acting says it lost; a
        // leader that acts anyway is refused by the storage.
        let lost = b.is_lost();
        println!("host-b wakes: is_lost() = {lost}");
        let accepted = rt
            .block_on(write(&mut storage, &b, "late, from b"))
            .map_err(|e| e.to_string())?;
        println!(
            "host-b's late write (term {}) accepted: {accepted}",
            b.term()
        );
        rt.block_on(async {
            drop(b);
            redlock.drain(Duration::from_secs(2)).await;
        });
        Ok((lost, accepted))
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // host-c campaigns too, and waits behind host-b.
    let c = tokio::spawn({
        let redlock = redlock.clone();
        async move {
            redlock
                .campaign("scheduler", "host-c", ttl)
                .value("10.0.0.3:8080")
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    println!("host-a resigns");
    a.resign().await?;
    let c = c.await??;
    println!("host-c leads, term {}", c.term());
    assert!(write(&mut storage, &c, "from c").await?);
    let (lost, accepted) = tokio::task::spawn_blocking(move || host_b.join())
        .await?
        .expect("host-b panicked")?;
    assert!(lost && !accepted, "host-b acted after losing");

    match redlock.leader("scheduler").await? {
        Some(l) => println!(
            "leader now: {} (term {}, at {:?})",
            l.identity, l.term, l.value
        ),
        None => println!("no leader now"),
    }
    c.resign().await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(())
}
