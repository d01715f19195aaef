//! Fencing tokens, end to end: a holder is paused past its lock's validity,
//! another takes the lock and writes, and the paused one's late write is
//! refused by the storage because its token is older.
//!
//! ```text
//! cargo run --example fencing        # starts five local redis-server processes and a storage node
//! ```
//!
//! The storage here is one Redis key guarded by a Lua compare: it keeps the
//! highest token it has seen and refuses a write with a lower one. A SQL
//! table does the same with
//! `UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2`
//! (no row updated: a stale token).

use std::time::Duration;

use redquorum::Redlock;
use redquorum::local_servers::LocalServers;

/// The storage side: write only with a token at least the highest seen.
const WRITE: &str = r"
if tonumber(ARGV[1]) < tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1";

async fn write(
    storage: &mut redis::aio::MultiplexedConnection,
    token: u64,
    value: &str,
) -> redis::RedisResult<bool> {
    redis::Script::new(WRITE)
        .key("account:42")
        .arg(token)
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

    let slow = redlock
        .lock("account:42", Duration::from_millis(500))
        .fenced()
        .await?;
    let stale = slow.fence().expect("a fenced lock carries a token");
    println!("holder A: token {stale}, then a 700 ms pause (GC, swap, …)");
    tokio::time::sleep(Duration::from_millis(700)).await;

    let fresh = redlock
        .lock("account:42", Duration::from_secs(5))
        .fenced()
        .await?;
    let token = fresh.fence().expect("a fenced lock carries a token");
    let accepted = write(&mut storage, token, "written by B").await?;
    println!("holder B: token {token}, write accepted: {accepted}");

    let late = write(&mut storage, stale, "written by A, too late").await?;
    println!("holder A wakes up and writes with token {stale}: accepted: {late}");
    assert!(accepted && !late, "the storage must refuse the stale token");
    fresh.release().await?;
    Ok(())
}
