//! The implementations under test, behind one [`Client`]: redquorum,
//! rslock, the floor (the same redis client doing the bare minimum on one
//! node: `SET NX PX`, then the release script) and the floor's two
//! commands through our lean client (`support/lean.rs`). Each can do one
//! lock + unlock ([`Client::cycle`]), one iteration of an uncontended
//! [`Cycle`] ([`Client::run`]: redquorum's other kinds) and a blocking
//! take, hold and release ([`Client::hold`], for the hand-off).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redquorum::Redlock;

use crate::lean;
use crate::uncontended::{Cycle, OWNER, PERMITS};
use crate::{TTL, TTL_MS};

/// One implementation under test.
#[derive(Clone)]
pub enum Client {
    Redquorum(Redlock),
    Rslock(rslock::LockManager),
    /// The same redis client on one node: `SET NX PX`, then the release script.
    Floor(MultiplexedConnection, Arc<str>),
    /// The floor's two commands through a minimal client of our own
    /// (`support/lean.rs`): what redis-rs costs, measured.
    Lean(lean::Lean, Arc<str>),
}

impl Client {
    pub fn name(&self) -> &'static str {
        match self {
            Client::Redquorum(_) => "redquorum",
            Client::Rslock(_) => "rslock",
            Client::Floor(..) => "floor",
            Client::Lean(..) => "floor_lean",
        }
    }

    /// One lock + unlock of `resource`.
    pub async fn cycle(&self, resource: &str) -> Result<(), String> {
        match self {
            Client::Redquorum(r) => {
                let lock = r.lock(resource, TTL).await.map_err(|e| e.to_string())?;
                lock.release().await.map_err(|e| e.to_string())
            }
            Client::Rslock(m) => {
                let lock = m.lock(resource, TTL).await.map_err(|e| e.to_string())?;
                m.unlock(&lock).await;
                Ok(())
            }
            Client::Floor(conn, sha) => {
                let mut conn = conn.clone();
                let mut token = [0u8; 20];
                rand::fill(&mut token);
                let token = hex::encode(token);
                let set: redis::Value = redis::cmd("SET")
                    .arg(resource)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                if set == redis::Value::Nil {
                    return Err("held".into());
                }
                let _: i64 = redis::cmd("EVALSHA")
                    .arg(&**sha)
                    .arg(1)
                    .arg(resource)
                    .arg(&token)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
            Client::Lean(conn, sha) => {
                let mut token = [0u8; 20];
                rand::fill(&mut token);
                let token = hex::encode(token);
                let (key, token) = (resource.as_bytes(), token.as_bytes());
                let set = lean::encode(&[b"SET", key, token, b"NX", b"PX", TTL_MS]);
                match conn.send(set).await {
                    Some(lean::Reply::Ok) => {}
                    other => return Err(format!("SET: {other:?}")),
                }
                let release = lean::encode(&[b"EVALSHA", sha.as_bytes(), b"1", key, token]);
                match conn.send(release).await {
                    Some(lean::Reply::Int(_)) => Ok(()),
                    other => Err(format!("EVALSHA: {other:?}")),
                }
            }
        }
    }

    /// One iteration of `cycle` on `resource` (and, for a set, names made
    /// from it).
    pub async fn run(&self, cycle: Cycle, resource: &str) -> Result<(), String> {
        let r = match (self, cycle) {
            (_, Cycle::Plain) => return self.cycle(resource).await,
            (Client::Redquorum(r), _) => r,
            (other, _) => {
                return Err(format!(
                    "{} has no {} lock",
                    other.name(),
                    cycle.lock_kind()
                ));
            }
        };
        let e = |e: redquorum::Error| e.to_string();
        match cycle {
            Cycle::Plain => unreachable!(),
            Cycle::Reentrant => {
                let lock = r.lock(resource, TTL).reentrant(OWNER).await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Nested => {
                let outer = r.lock(resource, TTL).reentrant(OWNER).await.map_err(e)?;
                let inner = r.lock(resource, TTL).reentrant(OWNER).await.map_err(e)?;
                inner.release().await.map_err(e)?;
                outer.release().await.map_err(e)
            }
            Cycle::LockAll3 => {
                let names = ["a", "b", "c"].map(|k| format!("{resource}:{k}"));
                let lock = r.lock_all(names, TTL).await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Fenced => {
                let lock = r.lock(resource, TTL).fenced().await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Semaphore => {
                let lock = r.lock(resource, TTL).permits(PERMITS).await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Read => {
                let lock = r.lock(resource, TTL).shared().await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Write => {
                let lock = r.lock(resource, TTL).await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Campaign => {
                let leadership = r.campaign(resource, OWNER, TTL).await.map_err(e)?;
                leadership.resign().await.map_err(e)
            }
        }
    }

    /// Waits until `resource` is held (each library's own blocking call),
    /// holds it for `hold`, and releases it. Returns when it was acquired
    /// and when the release started.
    pub async fn hold(&self, resource: &str, hold: Duration) -> Result<(Instant, Instant), String> {
        match self {
            Client::Redquorum(r) => {
                let lock = r.lock(resource, TTL).await.map_err(|e| e.to_string())?;
                let got = Instant::now();
                tokio::time::sleep(hold).await;
                let letting_go = Instant::now();
                lock.release().await.map_err(|e| e.to_string())?;
                Ok((got, letting_go))
            }
            Client::Rslock(m) => {
                let lock = m.acquire(resource, TTL).await.map_err(|e| e.to_string())?;
                let got = Instant::now();
                tokio::time::sleep(hold).await;
                let letting_go = Instant::now();
                lock.release().await;
                Ok((got, letting_go))
            }
            Client::Floor(..) | Client::Lean(..) => Err("the floor has no blocking lock".into()),
        }
    }
}
