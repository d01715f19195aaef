//! A Sentinel-managed node's URL:
//! `redis+sentinel://[user:password@]host1:port1[,host2:port2…]/<master>[/<db>]`
//! `[?sentinel_username=…&sentinel_password=…]`, parsed into a [`Sentinel`]
//! without I/O.
//!
//! The credentials before `@` are the data nodes' and go to the primary the
//! sentinels name; the query's are the sentinels' own (see the
//! [module above](super)). Errors say what to fix and never quote a piece
//! of a password: the user information ends at the **last** `@`, as
//! redaction finds it ([`redact`](mod@crate::net::topology::redact)), and a host
//! is quoted only in a URL without user information and with a numeric
//! port (what redaction would leave shown).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::ConnectionAddr;

use super::{Asker, Sentinel, addr};
use crate::net::topology::url::SENTINEL_SCHEMES as SCHEMES;

/// The default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;

/// What is wrong with a sentinel URL, for [`ConfigError::InvalidSentinelUrl`](crate::ConfigError::InvalidSentinelUrl).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum UrlError {
    /// `rediss+sentinel://`.
    Tls,
    /// Anything else, with what to fix.
    Invalid(String),
}

impl Sentinel {
    /// Parses `redis+sentinel://[user:password@]host1:port1[,host2:port2…]/<master>[/<db>]`
    /// `[?sentinel_username=…&sentinel_password=…]`. Does no I/O.
    /// `connect` (the node's connect timeout) bounds each query to a
    /// sentinel and connecting to the primary named, with its `ROLE`.
    pub(crate) fn parse(url: &str, connect: Duration) -> Result<Sentinel, UrlError> {
        let invalid = |reason: &str| Err(UrlError::Invalid(reason.to_owned()));
        let trimmed = url.trim();
        let Some((scheme, rest)) = trimmed.split_once("://") else {
            return invalid("no scheme");
        };
        if scheme.eq_ignore_ascii_case(SCHEMES[1]) {
            return Err(UrlError::Tls);
        }
        if !scheme.eq_ignore_ascii_case(SCHEMES[0]) {
            return invalid("not a redis+sentinel:// URL");
        }
        // The user information ends at the last '@', as `secret_span`
        // (topology/redact.rs) finds it for redaction: a password may hold '/', '?'
        // or '#' unencoded, and cutting at them first would leave part of
        // it in what is taken for the host list, and quoted in an error.
        let has_userinfo = rest.contains('@');
        let (userinfo, rest) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        if rest.contains('#') {
            return invalid("a fragment (#…) means nothing here: remove it");
        }
        let (hosts, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let mut addresses = Vec::new();
        for host in hosts.split(',') {
            let host = host.trim();
            if host.is_empty() {
                if hosts.trim().is_empty() {
                    return invalid(
                        "no sentinel address: give at least one host:port (three or more \
                         sentinels, comma-separated, are the usual)",
                    );
                }
                return invalid("an empty sentinel address between commas");
            }
            // A URL with an '@' may have a password where a host is
            // expected (a sentinel password with an '@' in the query, a
            // data password cut wrong): its host text is never quoted.
            // Nor is one whose port is not a number (the rule
            // `secret_span` redacts by): `:hunter2,h:1` is a password whose
            // `@` went missing.
            let shown = (!has_userinfo && port_is_number(host)).then_some(host);
            let (host, port) = parse_host(host, shown).map_err(UrlError::Invalid)?;
            // A sentinel listed twice (host names compared without case)
            // is one sentinel, with one vote: the majority is counted over
            // the distinct addresses.
            if !addresses
                .iter()
                .any(|(h, p): &(String, u16)| *p == port && h.eq_ignore_ascii_case(&host))
            {
                addresses.push((host, port));
            }
        }
        let mut parts = path.split('/');
        let master = parts.next().unwrap_or_default();
        if master.is_empty() {
            return invalid(
                "no master name: add the name the sentinels monitor it by, after the \
                 addresses (…:26379/mymaster)",
            );
        }
        // Percent-decoded, so that any name Sentinel takes can be given:
        // `Builder::sentinel_node` encodes it.
        if master.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return invalid(
                "a master name with spaces or control characters: percent-encode them \
                 (a space as %20), or give the name to Builder::sentinel_node, which does",
            );
        }
        let Some(master) = percent_decode(master).filter(|m| !m.is_empty()) else {
            return invalid(
                "the master name cannot be read: percent-encode `@ / ? # %` and spaces in it \
                 (`@` as %40, `/` as %2F, `?` as %3F, `#` as %23, `%` as %25), or give the \
                 name to Builder::sentinel_node, which does",
            );
        };
        let db = match parts.next() {
            None | Some("") => 0,
            Some(db) => match db.parse::<i64>() {
                Ok(db) if db >= 0 => db,
                _ => return invalid("the database after the master name is not a number"),
            },
        };
        if parts.next().is_some_and(|p| !p.is_empty()) {
            return invalid("too many path segments: the path is /<master-name>[/<db>]");
        }
        let (mut sentinel_user, mut sentinel_password) = (None, None);
        let decoded = |name: &str, v: &str| {
            percent_decode(v).ok_or_else(|| {
                UrlError::Invalid(format!(
                    "{name}= cannot be read: percent-encode special characters in it (`&` as \
                     %26, `%` as %25)"
                ))
            })
        };
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some((name @ "sentinel_username", v)) if !v.is_empty() => {
                    sentinel_user = Some(decoded(name, v)?);
                }
                Some((name @ "sentinel_password", v)) if !v.is_empty() => {
                    sentinel_password = Some(decoded(name, v)?);
                }
                Some((name @ ("sentinel_username" | "sentinel_password"), _)) => {
                    return Err(UrlError::Invalid(format!(
                        "{name}= is empty: give its value after '=', or leave it out"
                    )));
                }
                _ if pair.is_empty() => {}
                _ => {
                    return invalid(
                        "an unknown query parameter: the only ones are sentinel_username and \
                         sentinel_password",
                    );
                }
            }
        }
        // The data nodes' credentials and database, parsed (and
        // percent-decoded) by redis-rs on a placeholder address.
        let placeholder = match userinfo {
            Some(info) => format!("redis://{info}@127.0.0.1:1/{db}"),
            None => format!("redis://127.0.0.1:1/{db}"),
        };
        let data = redis::Client::open(placeholder.as_str())
            .map_err(|_| {
                UrlError::Invalid(
                    "the credentials before '@' cannot be read: percent-encode special \
                     characters in them (`/` as %2F, `?` as %3F, `#` as %23, `@` as %40)"
                        .to_owned(),
                )
            })?
            .get_connection_info()
            .clone();
        let sentinels = addresses
            .iter()
            .map(|(host, port)| {
                let mut settings = redis::RedisConnectionInfo::default();
                if let Some(user) = &sentinel_user {
                    settings = settings.set_username(user);
                }
                if let Some(password) = &sentinel_password {
                    settings = settings.set_password(password);
                }
                let info = data
                    .clone()
                    .set_addr(ConnectionAddr::Tcp(host.clone(), *port))
                    .set_redis_settings(settings);
                match redis::Client::open(info) {
                    Ok(client) => Ok(Arc::new(Asker {
                        client,
                        conn: Mutex::new(None),
                    })),
                    Err(_) => Err(UrlError::Invalid(format!(
                        "sentinel address {} cannot be used",
                        addr(host, *port)
                    ))),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Sentinel {
            master,
            addresses,
            sentinels,
            limit: connect,
            data,
        })
    }
}

/// `text` with its `%XX` escapes decoded; `None` if an escape is not two
/// hex digits or the result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Whether a host list's piece has a number, or nothing, after its host's
/// `:` (an IPv6 address's colons, in brackets, are not the port's).
fn port_is_number(piece: &str) -> bool {
    let host = match piece.strip_prefix('[') {
        Some(rest) => rest.find(']').map_or(piece.len(), |i| i + 2),
        None => 0,
    };
    match piece[host..].find(':') {
        Some(colon) => piece[host + colon + 1..]
            .bytes()
            .all(|b| b.is_ascii_digit()),
        None => true,
    }
}

/// `host[:port]` or `[ipv6][:port]`; the port defaults to 26379. Errors
/// quote `text` only if `shown` is it (never in a URL with user
/// information, whose password could be taken for a host).
fn parse_host(text: &str, shown: Option<&str>) -> Result<(String, u16), String> {
    let quoted = match shown {
        Some(shown) => format!("sentinel address {shown:?}"),
        None => "a sentinel address (not shown: it may hold a password; percent-encode \
                 `/ ? # @` in credentials)"
            .to_owned(),
    };
    let bad_port = || {
        format!(
            "{quoted} has no valid port: give host:port, the port a number from 1 to \
             65535 (26379 when left out)"
        )
    };
    if !text.starts_with('[') && text.matches(':').count() > 1 {
        return Err(format!(
            "{quoted} looks like an IPv6 address without brackets: write [::1]:26379"
        ));
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(format!("{quoted}: an IPv6 address without its ']'"));
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(bad_port()),
            },
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(format!("{quoted} has no host"));
    }
    let port = match port {
        None => SENTINEL_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(bad_port()),
        },
    };
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connect timeout the parsed nodes get (the builder's default).
    const CONNECT: Duration = Duration::from_secs(2);

    fn reason(url: &str) -> String {
        match Sentinel::parse(url, CONNECT) {
            Err(UrlError::Invalid(reason)) => reason,
            Err(UrlError::Tls) => "tls".to_owned(),
            Ok(s) => panic!("{url} parsed: {s:?}"),
        }
    }

    #[test]
    fn parses_sentinel_urls() {
        let s = Sentinel::parse(
            "redis+sentinel://u:p%40ss@10.0.0.1:26379,10.0.0.2,[::1]:26380/mymaster/3",
            CONNECT,
        )
        .unwrap();
        assert_eq!(s.master, "mymaster");
        assert_eq!(
            s.addresses,
            [
                ("10.0.0.1".to_owned(), 26379),
                ("10.0.0.2".to_owned(), 26379),
                ("::1".to_owned(), 26380)
            ]
        );
        assert_eq!(s.data.redis_settings().db(), 3);
        assert_eq!(s.data.redis_settings().username(), Some("u"));
        assert_eq!(s.data.redis_settings().password(), Some("p@ss"));
        // The data nodes' password is not the sentinels'.
        assert_eq!(
            s.sentinels[0]
                .client
                .get_connection_info()
                .redis_settings()
                .password(),
            None
        );
        assert_eq!(
            s.name(),
            "mymaster@10.0.0.1:26379,10.0.0.2:26379,[::1]:26380"
        );
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("p@ss") && !shown.contains("p%40ss"),
            "{shown}"
        );

        let s = Sentinel::parse(
            "REDIS+SENTINEL://h:1/m?sentinel_username=admin&sentinel_password=s3cret",
            CONNECT,
        )
        .unwrap();
        let sentinel = s.sentinels[0].client.get_connection_info().redis_settings();
        assert_eq!(
            (sentinel.username(), sentinel.password()),
            (Some("admin"), Some("s3cret"))
        );
        assert_eq!(s.data.redis_settings().password(), None);
        assert!(!format!("{s:?}").contains("s3cret"));

        // Percent-decoded: `%26` is how an '&' is written.
        let s = Sentinel::parse(
            "redis+sentinel://h:1/m?sentinel_username=a%40b&sentinel_password=ab%26cd%25",
            CONNECT,
        )
        .unwrap();
        let sentinel = s.sentinels[0].client.get_connection_info().redis_settings();
        assert_eq!(
            (sentinel.username(), sentinel.password()),
            (Some("a@b"), Some("ab&cd%"))
        );
        let r = reason("redis+sentinel://h:1/m?sentinel_password=ab%zzcd");
        assert!(r.contains("percent-encode"), "{r}");
        assert!(!r.contains("zzcd"), "{r}");
    }

    #[test]
    fn says_what_to_fix_in_a_bad_url() {
        assert!(reason("redis+sentinel:///m").contains("no sentinel address"));
        assert!(reason("redis+sentinel://@/m").contains("no sentinel address"));
        assert!(reason("redis+sentinel://h:1,,h:2/m").contains("empty sentinel address"));
        assert!(reason("redis+sentinel://h:1").contains("no master name"));
        assert!(reason("redis+sentinel://h:1/").contains("no master name"));
        for port in ["0", "65536", "x", ""] {
            let r = reason(&format!("redis+sentinel://h:{port}/m"));
            assert!(r.contains("no valid port"), "{r}");
        }
        assert!(reason("redis+sentinel://[::1/m").contains("IPv6"));
        assert!(reason("redis+sentinel://h:1/m/x").contains("database"));
        assert!(reason("redis+sentinel://h:1/m/0/x").contains("path"));
        assert!(reason("redis+sentinel://h:1/m?password=x").contains("query parameter"));
        assert!(reason("redis+sentinel://h:1/m#insecure").contains("fragment"));
        assert_eq!(reason("rediss+sentinel://h:1/m"), "tls");
    }

    #[test]
    fn no_fragment_of_a_password_is_quoted_in_an_error() {
        // Unencoded `/ ? # @` in the data password (and `@ &` in the
        // sentinels' one, or a password taken for a host): whatever the parse
        // makes of them, no piece of the password is quoted.
        for (url, password) in [
            (
                "redis+sentinel://user:hunter/2@10.0.0.1:26379/m",
                "hunter/2",
            ),
            (
                "redis+sentinel://user:hunter?2@10.0.0.1:26379/m",
                "hunter?2",
            ),
            (
                "redis+sentinel://user:hun#ter2@10.0.0.1:26379/m",
                "hun#ter2",
            ),
            ("redis+sentinel://user:abc/def@10.0.0.1/m", "abc/def"),
            ("redis+sentinel://user:pqq@sss@h:1/m", "pqq@sss"),
            ("redis+sentinel://user:x/y?z#w@v@h:1/m", "x/y?z#w@v"),
            ("redis+sentinel://user:qqz/xyw:yyk@h:1/m", "qqz/xyw:yyk"),
            (
                "redis+sentinel://h:1/m?sentinel_password=zqv@xwk:jjq/x",
                "zqv@xwk:jjq/x",
            ),
            (
                "redis+sentinel://h:1/m?sentinel_password=zqv@xwk:jjq",
                "zqv@xwk:jjq",
            ),
            // An unencoded '&' in the sentinels' password.
            (
                "redis+sentinel://h:1/m?sentinel_password=ab&cdsecret",
                "ab&cdsecret",
            ),
            // A password whose '@' went missing, taken for a host.
            ("redis+sentinel://:hunter2,h:1/m", "hunter2"),
        ] {
            let shown = match Sentinel::parse(url, CONNECT) {
                Ok(s) => format!("{s:?} {}", s.name()),
                Err(e) => format!("{e:?}"),
            };
            let err = crate::Redlock::builder().node(url).build();
            let shown = match err {
                Ok(r) => format!("{shown} {r:?}"),
                Err(e) => format!("{shown} {e} {e:?}"),
            };
            // Every piece of the password three characters or longer.
            let pieces: Vec<&str> = password
                .split(['/', '?', '#', '@', ':', '&'])
                .filter(|p| p.len() >= 3)
                .collect();
            for piece in pieces {
                assert!(!shown.contains(piece), "{url}: {piece:?} in {shown}");
            }
        }
        let r = reason("redis+sentinel://user:hunter/2@10.0.0.1:26379/m");
        assert!(r.contains("percent-encode"), "{r}");
    }

    /// Any name Sentinel accepts comes back whole from the URL
    /// `Builder::sentinel_node` makes of it; an unencoded one that cannot
    /// be read says how to write it.
    #[test]
    fn master_names_with_special_characters_are_encoded_and_decoded() {
        use crate::net::topology::url::sentinel_node_url;
        for name in [
            "cache@eu",
            "my?master",
            "a/b",
            "x#y",
            "50%off",
            "has space",
            "é",
            "a&b=c",
            "plain-name_1.2~",
        ] {
            let url = sentinel_node_url(name, ["h:1", "h:2"]);
            let s = Sentinel::parse(&url, CONNECT).unwrap_or_else(|e| panic!("{url}: {e:?}"));
            assert_eq!(s.master, name, "{url}");
            assert_eq!(s.addresses.len(), 2, "{url}");
            assert_eq!(s.name(), format!("{name}@h:1,h:2"));
        }
        assert_eq!(
            sentinel_node_url("cache@eu", ["h:1"]),
            "redis+sentinel://h:1/cache%40eu"
        );
        // Written by hand, encoded: the same.
        let s = Sentinel::parse("redis+sentinel://h:1/my%3Fmaster/2", CONNECT).unwrap();
        assert_eq!(
            (s.master.as_str(), s.data.redis_settings().db()),
            ("my?master", 2)
        );
        for bad in ["redis+sentinel://h:1/50%zz", "redis+sentinel://h:1/%"] {
            let r = reason(bad);
            assert!(r.contains("percent-encode") && r.contains("%40"), "{r}");
        }
        assert!(reason("redis+sentinel://h:1/a b").contains("%20"));
    }

    #[test]
    fn empty_parameters_and_bare_ipv6_hosts_say_what_to_fix() {
        let r = reason("redis+sentinel://h:1/m?sentinel_password=");
        assert!(r.contains("sentinel_password= is empty"), "{r}");
        let r = reason("redis+sentinel://::1/m");
        assert!(r.contains("brackets"), "{r}");
    }

    #[test]
    fn a_sentinel_listed_twice_has_one_vote() {
        let s = Sentinel::parse("redis+sentinel://s1:1,S1:1,s2:2,s1:3/m", CONNECT).unwrap();
        assert_eq!(
            s.addresses,
            [
                ("s1".to_owned(), 1),
                ("s2".to_owned(), 2),
                ("s1".to_owned(), 3)
            ]
        );
        assert_eq!(s.sentinels.len(), 3);
    }
}
