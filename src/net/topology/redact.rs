//! Redaction: a node's URL as it may be shown, in errors, logs and `Debug`.
//!
//! A URL carries passwords in up to three places, and redaction must find
//! each even in a URL that does not parse (the very one an error is about):
//!
//! * the user information, `user:password@`, up to the **last** `@` (a
//!   password may hold an unencoded `@`, `/`, `?` or `#`);
//! * the query's secret parameters, `pass=` and `password=` (unix-socket
//!   URLs) and `sentinel_password=` (Sentinel-managed nodes), each up to
//!   the next `&` that starts a parameter we know (an unencoded `&` in the
//!   password hides the rest of it, not only the part before the `&`);
//! * a port that is not a number: what is left of a password whose `@host`
//!   went missing (`redis://:hunter2` is `redis://:hunter2,x@host` cut at
//!   its comma), which a real port never is.
//!
//! [`redact`] replaces all three with `***`; [`redact_all`] takes them out
//! of a parser's message, which may quote the URL or parts of it. The
//! Sentinel URL parser (`sentinel::url`) never quotes a host
//! that these rules would hide, so that its errors agree with them.

/// A URL with its password replaced, for error messages, logs and `Debug`:
/// the password of `user:password@`, and the value of a `pass=`,
/// `password=` (unix-socket URLs carry it there) or `sentinel_password=`
/// query parameter (up to the next `&` that starts a known parameter, see
/// [`secret_values`]). A URL that does not parse may carry its password
/// elsewhere (see [`secret_span`]): that is replaced too.
pub(crate) fn redact(url: &str) -> String {
    // The query's passwords first: one may hold an '@' (one written
    // unencoded), which `secret_span` would take for the end of the user
    // information, leaving the rest of it shown.
    let mut out = url.to_owned();
    for value in secret_values(url).into_iter().rev() {
        out.replace_range(value, "***");
    }
    match secret_span(&out) {
        Some(span) => format!("{}***{}", &out[..span.start], &out[span.end..]),
        None => out,
    }
}

/// Whether a URL's query parameter `key` carries a password: `pass` and
/// `password` (unix-socket URLs), `sentinel_password` (Sentinel-managed
/// nodes).
fn is_secret_parameter(key: &str) -> bool {
    matches!(key, "pass" | "password" | "sentinel_password")
}

/// The query parameters a URL of ours may carry (redis-rs's and a
/// Sentinel-managed node's): a secret value ends only before an `&` that
/// starts one of these.
fn is_known_parameter(key: &str) -> bool {
    is_secret_parameter(key)
        || matches!(
            key,
            "sentinel_username" | "user" | "username" | "db" | "protocol" | "insecure"
        )
}

/// Where the values of the query's secret parameters are: each from its
/// `=` to the next `&` followed by a known parameter's name (or the end),
/// so that an unencoded `&` in a password (`sentinel_password=ab&cd`)
/// hides all of it, not the part before the `&` only.
fn secret_values(url: &str) -> Vec<std::ops::Range<usize>> {
    let mut values = Vec::new();
    let Some(q) = url.find('?') else {
        return values;
    };
    let mut pos = q + 1;
    while pos <= url.len() {
        let pair_end = url[pos..].find('&').map_or(url.len(), |i| pos + i);
        let next = match url[pos..pair_end].split_once('=') {
            Some((key, _)) if is_secret_parameter(key) => {
                let start = pos + key.len() + 1;
                let mut end = url.len();
                let mut from = start;
                while let Some(i) = url[from..].find('&') {
                    let amp = from + i;
                    let name = url[amp + 1..].split(['=', '&']).next().unwrap_or("");
                    if is_known_parameter(name) {
                        end = amp;
                        break;
                    }
                    from = amp + 1;
                }
                values.push(start..end);
                end
            }
            _ => pair_end,
        };
        pos = next + 1;
    }
    values
}

/// Where, outside the query, a URL may carry a password: the user
/// information before the last `@` (all of it, user too), after the
/// scheme's `://` or, in a fragment without one, from the start; with no
/// `@`, a port that is not a number (all that follows the host's `:`; of
/// any host of a comma-separated list): a
/// password whose `@host` went missing (`redis://:hunter2` is what is left
/// of `redis://:hunter2,x@host` cut at its comma), which a real port never
/// is.
fn secret_span(url: &str) -> Option<std::ops::Range<usize>> {
    let start = url.find("://").map_or(0, |i| i + 3);
    if let Some(at) = url.rfind('@').filter(|&at| at >= start) {
        return Some(start..at);
    }
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    // A Sentinel-managed node lists its sentinels with commas: each has a
    // port of its own.
    let mut offset = start;
    for piece in url[start..end].split(',') {
        // An IPv6 address's colons are not the port's.
        let host = match piece.strip_prefix('[') {
            Some(rest) => rest.find(']').map_or(piece.len(), |i| i + 2),
            None => 0,
        };
        if let Some(colon) = piece[host..].find(':') {
            let port = offset + host + colon + 1;
            let number = url[port..offset + piece.len()]
                .bytes()
                .all(|b| b.is_ascii_digit());
            if !number {
                return Some(port..end);
            }
        }
        offset += piece.len() + 1;
    }
    None
}

/// `text` with every password of `url` taken out: a parser's message may
/// quote the URL, or parts of it.
pub(crate) fn redact_all(text: &str, url: &str) -> String {
    let mut secrets = Vec::new();
    if let Some(span) = secret_span(url) {
        let found = &url[span.clone()];
        secrets.push(if url[span.end..].starts_with('@') {
            // `user:password@`: the user is no secret.
            found.split_once(':').map_or(found, |(_, p)| p)
        } else {
            found
        });
    }
    secrets.extend(secret_values(url).into_iter().map(|value| &url[value]));
    secrets
        .into_iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_owned(), |text, secret| text.replace(secret, "***"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_wherever_they_are() {
        assert_eq!(redact("redis://u:p@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(
            redact("redis+unix:///s.sock?db=1&pass=x&password=y"),
            "redis+unix:///s.sock?db=1&pass=***&password=***"
        );
        // A URL with a comma in its password is one URL, and so redacted.
        assert_eq!(redact("redis://:hunter2,secret@h:1"), "redis://***@h:1");
        assert_eq!(redact("redis://admin:s3cr3t,@h:1"), "redis://***@h:1");
        // What is left of one cut at that comma: no '@', a password where
        // the port would be, or a user information without its scheme.
        assert_eq!(redact("redis://:hunter2"), "redis://:***");
        assert_eq!(redact("redis://admin:s3cr3t"), "redis://admin:***");
        assert_eq!(redact("redis://admin:s3:cr3t/0"), "redis://admin:***/0");
        assert_eq!(redact("secret@h:1"), "***@h:1");
        // Ports, IPv6 addresses and paths are not secrets.
        for url in [
            "redis://h:6379/0",
            "redis://[fe80::1]:6379",
            "redis://[fe80::1]",
            "redis://[fe80::1",
            "redis+unix:///tmp/a:b.sock",
            "redis://h",
        ] {
            assert_eq!(redact(url), url);
        }
    }

    #[test]
    fn sentinel_urls_are_redacted() {
        assert_eq!(
            redact("redis+sentinel://h1:1,[::1]:2,h3/m/0"),
            "redis+sentinel://h1:1,[::1]:2,h3/m/0"
        );
        assert_eq!(
            redact("redis+sentinel://u:pw@h1:1,h2:2/m?sentinel_password=x"),
            "redis+sentinel://***@h1:1,h2:2/m?sentinel_password=***"
        );
        // An unencoded '&' in a password: all of it is hidden, up to the
        // next known parameter.
        assert_eq!(
            redact("redis+sentinel://h:1/m?sentinel_password=ab&cdsecret"),
            "redis+sentinel://h:1/m?sentinel_password=***"
        );
        assert_eq!(
            redact("redis+sentinel://h:1/m?sentinel_password=ab&cd=x&sentinel_username=u"),
            "redis+sentinel://h:1/m?sentinel_password=***&sentinel_username=u"
        );
        assert_eq!(
            redact("redis+sentinel://h:1/m?sentinel_username=u&sentinel_password=x&"),
            "redis+sentinel://h:1/m?sentinel_username=u&sentinel_password=***"
        );
    }
}
