//! The Lua scripts of the protocol, and their SHA1 digests for `EVALSHA`.
//!
//! Acquisition is a plain `SET key token NX PX ttl`. Release and extension
//! must touch the key only if it still holds *our* token, atomically, so they
//! are scripts: compare-and-delete and compare-and-pexpire. Both answer
//!
//! * `1`: the key held our token and was deleted / given the new TTL (a
//!   release may also announce itself to waiters);
//! * `2`: (release) deleted, but the node refused to publish the
//!   announcement (an ACL without `PUBLISH`);
//! * `0`: the key was missing (expired, already released, node restarted);
//! * `-1`: the key held someone else's token; it was left alone.
//!
//! The extension script never creates a key: a node that lost the key does
//! not get it back, so an extension cannot resurrect a lock that a majority
//! has forgotten.
//!
//! Scripts are sent by `EVALSHA`; a node that answers `NOSCRIPT` (after a
//! restart or `SCRIPT FLUSH`) gets the source by `EVAL`, which also caches it
//! again (see [`crate::node`]).

use std::sync::LazyLock;

/// Deleted, or given the new TTL.
pub(crate) const DONE: i64 = 1;
/// Deleted, but the announcement was refused.
pub(crate) const RELEASED_UNANNOUNCED: i64 = 2;
/// The key was missing.
pub(crate) const MISSING: i64 = 0;

/// A Lua script and its SHA1 digest.
pub(crate) struct Script {
    pub(crate) source: &'static str,
    pub(crate) sha1: String,
}

impl Script {
    fn new(source: &'static str) -> Script {
        Script {
            source,
            sha1: sha1_smol::Sha1::from(source).digest().to_string(),
        }
    }
}

/// `KEYS[1]` = key, `ARGV[1]` = token, `ARGV[2]` = `"1"` to announce the
/// release: the token is published on the channel `<key>:released`, which
/// waiters listen on (see [`crate::waiters`]). The publication is a
/// `pcall`: a node whose ACL forbids `PUBLISH` still releases, and answers
/// `2` to say that it did not announce.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] == '1' then
    local r = redis.pcall('PUBLISH', KEYS[1] .. ':released', ARGV[1])
    if type(r) == 'table' and r.err then
      return 2
    end
  end
  return 1
elseif v then
  return -1
end
return 0"#,
    )
});

/// `KEYS[1]` = key, `ARGV[1]` = token, `ARGV[2]` = TTL in milliseconds.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif v then
  return -1
end
return 0"#,
    )
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha1_of_the_source() {
        // Known vector: SHA1("abc").
        assert_eq!(
            Script::new("abc").sha1,
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        for s in [&*RELEASE, &*EXTEND] {
            assert_eq!(s.sha1.len(), 40);
        }
        assert_ne!(RELEASE.sha1, EXTEND.sha1);
    }
}
