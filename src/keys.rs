//! How a resource's name becomes its Redis key, and back.
//!
//! On plain servers the key of resource `r` is `prefix + r`, as other
//! Redlock clients write it (so that they interoperate on one name).
//!
//! When any node of the Redlock is a Redis Cluster, every key one lock
//! touches on a node must hash to one slot: the lock's scripts run on one
//! primary and read or write the side keys built from the lock key
//! (`<key>:waiters`, `<key>:intent`, `<key>:leader`, `<key>:terms`,
//! `<key>:fence`). So the
//! key is then wrapped in a hash tag — `{prefix + r}` — unless `prefix + r`
//! already holds a non-empty tag `{…}`, which then decides the slot (the
//! user's way to put several resources of a `lock_all` in one slot:
//! `{order:42}:a`, `{order:42}:b`). Either way the side keys start with the
//! key and so carry its tag. The layout of every node follows the same
//! rule, plain servers of a mixed Redlock included, so that a name has one
//! key everywhere.
//!
//! The slot is Redis's: CRC16 (XMODEM) of the tag, or of the whole key
//! without one, modulo 16384 ([`key_slot`]).

/// The key of `resource`: `prefix + resource`, wrapped in `{…}` for a
/// Redlock with a cluster node unless it already carries a hash tag.
pub(crate) fn key(prefix: &str, cluster: bool, resource: &str) -> Box<str> {
    let plain = format!("{prefix}{resource}");
    if !cluster || hash_tag(plain.as_bytes()).is_some() {
        plain.into()
    } else {
        format!("{{{plain}}}").into()
    }
}

/// The resource whose key is `key` ([`key`]'s inverse), if it is one.
pub(crate) fn resource<'k>(prefix: &str, cluster: bool, key_: &'k str) -> Option<&'k str> {
    let unwrapped = key_.strip_prefix('{').and_then(|k| k.strip_suffix('}'));
    [unwrapped, Some(key_)]
        .into_iter()
        .flatten()
        .filter_map(|plain| plain.strip_prefix(prefix))
        .find(|r| *key(prefix, cluster, r) == *key_)
}

/// The hash tag of `key`: what is between its first `{` and the next `}`,
/// if that is not empty (Redis's rule).
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')?;
    let tag = &key[open + 1..open + 1 + close];
    (!tag.is_empty()).then_some(tag)
}

/// The cluster slot of `key` (`CLUSTER KEYSLOT`).
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % 16384
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_slots() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), 3443);
        // An empty tag is no tag: the whole key is hashed.
        assert_eq!(key_slot(b"foo{}{bar}"), 8363);
        assert_eq!(key_slot(b"foo{{bar}}zap"), 4015);
        assert_eq!(key_slot(b"{bar"), 4015);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn keys_and_resources_round_trip() {
        let p = "redquorum:";
        for cluster in [false, true] {
            for p in [p, "{app}:"] {
                for name in ["a", "{order:42}:a", "x{}", "}{", "", "{", "a}b{c", "b}"] {
                    let k = key(p, cluster, name);
                    assert_eq!(resource(p, cluster, &k), Some(name), "{k}");
                }
            }
        }
        assert_eq!(&*key(p, false, "a"), "redquorum:a");
        assert_eq!(&*key(p, true, "a"), "{redquorum:a}");
        assert_eq!(&*key(p, true, "{order:42}:a"), "redquorum:{order:42}:a");
        assert_eq!(&*key(p, true, "x{}"), "{redquorum:x{}}");
        assert_eq!(resource(p, true, "other:a"), None);
        assert_eq!(resource(p, false, "{redquorum:a}"), None);
        // The side keys share the key's slot.
        for name in ["a", "{order:42}:a"] {
            let k = key(p, true, name);
            for side in [
                ":waiters", ":intent", ":leader", ":terms", ":fence", ":wake:c",
            ] {
                let s = format!("{k}{side}");
                assert_eq!(key_slot(s.as_bytes()), key_slot(k.as_bytes()), "{s}");
            }
        }
    }
}
