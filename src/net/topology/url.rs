//! What a node's URL says: which topology it names, and the URLs the
//! builder's `sentinel_node` and `cluster_node` stand for.
//!
//! Every node is given as one URL, and its scheme picks the topology:
//!
//! | scheme | node | parsed by |
//! |---|---|---|
//! | `redis://`, `valkey://`, `redis+unix://` (`rediss://`, `valkeys://` for TLS) | one server | redis-rs ([`plain`](super::plain)) |
//! | `redis+sentinel://` (`rediss+sentinel://` is refused) | a Sentinel-managed primary | `sentinel::url` (feature `sentinel`) |
//! | `redis+cluster://`, `valkey+cluster://` (TLS refused) | a Redis Cluster | [`cluster_seeds`], here |
//!
//! The schemes are told apart here, without the features: a URL whose
//! topology was left out of the build is refused with the feature to add
//! (`ConfigError::SentinelNotEnabled`, `ClusterNotEnabled`), not read as
//! another kind of node. A cluster URL is cut into its seeds here for the
//! same reason (its errors, `InvalidClusterUrl`, are the same with or
//! without the feature). Nothing here does I/O, and every error shows the
//! URL redacted ([`redact`](mod@super::redact)).

use crate::error::ConfigError;

use super::redact::redact;

/// The URL schemes of a Sentinel-managed node (the second asks for TLS).
pub(crate) const SENTINEL_SCHEMES: [&str; 2] = ["redis+sentinel", "rediss+sentinel"];

/// The URL of the Sentinel-managed node that the sentinels at `sentinels`
/// (`host:port` each) know as `master_name`: what
/// [`Builder::sentinel_node`](crate::Builder::sentinel_node) adds. The
/// name is percent-encoded (every byte but `A-Z a-z 0-9 - . _ ~`), so that
/// any name Sentinel accepts (`cache@eu`, `my?master`, `a/b`, `50%`, with
/// spaces) comes back whole from the URL's path, which is percent-decoded.
pub(crate) fn sentinel_node_url<I, S>(master_name: &str, sentinels: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let hosts: Vec<String> = sentinels
        .into_iter()
        .map(|s| s.as_ref().trim().to_owned())
        .collect();
    format!(
        "{}://{}/{}",
        SENTINEL_SCHEMES[0],
        hosts.join(","),
        percent_encode(master_name)
    )
}

/// `text` with every byte but the URL's unreserved ones (`A-Z a-z 0-9 - .
/// _ ~`) written `%XX`.
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The URL of the cluster node reached through `seeds` (`host:port` or
/// `redis://[user:password@]host:port` each), what
/// [`Builder::cluster_node`](crate::Builder::cluster_node) adds, and what
/// is wrong with the seeds, if anything (for `build` to tell: the builder
/// call cannot fail). The URL is made even then.
pub(crate) fn cluster_node_url<I, S>(seeds: I) -> (String, Option<ConfigError>)
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut userinfo: Option<String> = None;
    let mut hosts = Vec::new();
    let mut tls = false;
    let mut foreign = false;
    let mut mixed = false;
    for seed in seeds {
        let seed = seed.as_ref().trim();
        let rest = match seed.split_once("://") {
            Some((scheme, rest)) => {
                let is = |s: &str| scheme.eq_ignore_ascii_case(s);
                tls |= is("rediss") || is("valkeys");
                foreign |= !(is("redis") || is("valkey") || is("rediss") || is("valkeys"));
                rest
            }
            None => seed,
        };
        let (user, host) = match rest.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, rest),
        };
        if let Some(user) = user {
            match &userinfo {
                None => userinfo = Some(format!("{user}@")),
                Some(known) => mixed |= known.strip_suffix('@') != Some(user),
            }
        }
        hosts.push(host.trim_end_matches('/').to_owned());
    }
    let hosts = hosts.join(",");
    // Shown as the URL it stands for, redacted (a seed cut at a comma
    // in its password, `:hunter2`, has no `@` and looks like a host).
    let bad = |reason: &str| ConfigError::InvalidClusterUrl {
        url: redact(&format!("redis+cluster://***@{hosts}")),
        reason: reason.to_owned(),
    };
    let refused = if tls {
        Some(bad("TLS to a cluster node is not supported yet"))
    } else if foreign {
        Some(bad(
            "a seed is host:port or redis://[user:password@]host:port (valkey:// too)",
        ))
    } else if mixed {
        Some(bad(
            "the seeds give different users or passwords: a cluster node takes one for all \
             its seeds (give it on one seed, or the same on each)",
        ))
    } else {
        None
    };
    let url = format!("redis+cluster://{}{hosts}", userinfo.unwrap_or_default());
    (url, refused)
}

/// The seeds of a cluster node's URL,
/// `redis+cluster://[user:password@]host:port[,host:port…]`, as one
/// `redis://[user:password@]host:port` each; `None` for another scheme.
/// Nothing else is taken: no database (a cluster has one), no query, no
/// TLS yet.
pub(crate) fn cluster_seeds(url: &str) -> Result<Option<Vec<String>>, ConfigError> {
    let trimmed = url.trim();
    let Some((scheme, rest)) = trimmed.split_once("://") else {
        return Ok(None);
    };
    let bad = |reason: &str| ConfigError::InvalidClusterUrl {
        url: redact(url),
        reason: reason.to_owned(),
    };
    if scheme.eq_ignore_ascii_case("rediss+cluster")
        || scheme.eq_ignore_ascii_case("valkeys+cluster")
    {
        return Err(bad("TLS to a cluster node is not supported yet"));
    }
    if !(scheme.eq_ignore_ascii_case("redis+cluster")
        || scheme.eq_ignore_ascii_case("valkey+cluster"))
    {
        return Ok(None);
    }
    let (userinfo, hosts) = match rest.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), rest),
    };
    // One user and password for every seed, before the first: a second
    // '@' is a seed with credentials of its own (`a:p@h1:1,b:q@h2:2`,
    // whose first seed would be taken for a password), or an unencoded
    // '@' in the password; either way which seeds there are cannot be
    // told, and none may be dropped.
    if userinfo.matches('@').count() > 1 {
        return Err(bad(
            "more than one '@': a cluster node takes one user and password, before its \
             first seed, for all its seeds (redis+cluster://user:password@h1:1,h2:2); \
             per-seed credentials are not supported, and an '@' in the password is written \
             %40",
        ));
    }
    let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
    if hosts.contains(['/', '?', '#']) {
        return Err(bad(
            "a cluster node takes no database, path or query: give only host:port seeds",
        ));
    }
    let mut seeds = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(bad(
                "an empty seed: give host:port seeds separated by commas",
            ));
        }
        let port = host
            .rsplit_once(':')
            .filter(|(h, _)| !h.is_empty() && !h.ends_with(':'))
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .filter(|&p| p != 0);
        if port.is_none() {
            // The seed is shown only if it cannot be a password's piece.
            return Err(bad(
                "every seed needs a host and a port (1-65535): host:port,host:port",
            ));
        }
        seeds.push(format!("redis://{userinfo}{host}"));
    }
    Ok(Some(seeds))
}

/// Whether `url` names a Sentinel-managed node.
pub(crate) fn is_sentinel(url: &str) -> bool {
    let scheme = url.trim_start().split("://").next().unwrap_or_default();
    SENTINEL_SCHEMES
        .iter()
        .any(|s| scheme.eq_ignore_ascii_case(s))
}

/// Whether `url` asks for TLS.
pub(crate) fn is_tls(url: &str) -> bool {
    let scheme = url.trim_start().split("://").next().unwrap_or_default();
    scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_give_seeds_or_say_what_to_fix() {
        assert_eq!(cluster_seeds("redis://h:1").unwrap(), None);
        assert_eq!(
            cluster_seeds("redis+cluster://u:p,w@a:1,b:2").unwrap(),
            Some(vec![
                "redis://u:p,w@a:1".to_owned(),
                "redis://u:p,w@b:2".to_owned()
            ])
        );
        // Whitespace around a URL is no part of it.
        assert_eq!(
            cluster_seeds(" redis+cluster://a:1 ").unwrap(),
            Some(vec!["redis://a:1".to_owned()])
        );
        for bad in [
            "redis+cluster://",
            "redis+cluster://a:1,,b:2",
            "redis+cluster://a",
            "redis+cluster://a:0",
            "redis+cluster://:1",
            "redis+cluster://a:1/0",
            "redis+cluster://u:hunter2@a:1?x=1",
            "rediss+cluster://u:hunter2@a:1",
            "redis+cluster://:hunter2",
        ] {
            let e = cluster_seeds(bad).unwrap_err();
            assert!(
                matches!(e, ConfigError::InvalidClusterUrl { .. }),
                "{bad}: {e:?}"
            );
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("host:port"), "{shown}");
        }
    }

    /// A seed with credentials of its own is refused, never swallowed
    /// into the first seed's password.
    #[test]
    fn per_seed_credentials_are_refused_not_swallowed() {
        for url in [
            "redis+cluster://a:hunter2@h1:1,b:qwerty9@h2:2",
            "redis+cluster://:hunter2@h1:1,:hunter2@h2:2",
            "redis+cluster://u:hunter2@x@h1:1",
        ] {
            let e = cluster_seeds(url).unwrap_err();
            assert!(
                matches!(e, ConfigError::InvalidClusterUrl { .. }),
                "{url}: {e:?}"
            );
            let shown = format!("{e} {e:?}");
            assert!(shown.contains("more than one '@'"), "{shown}");
            assert!(shown.contains("%40"), "{shown}");
            assert!(
                !shown.contains("hunter2") && !shown.contains("qwerty9"),
                "{shown}"
            );
        }
        // Encoded, the '@' is the password's: one seed, its password kept.
        assert_eq!(
            cluster_seeds("redis+cluster://u:p%40x@h1:1").unwrap(),
            Some(vec!["redis://u:p%40x@h1:1".to_owned()])
        );
    }
}
