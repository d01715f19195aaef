//! A node that is one server: `redis://`, `valkey://`, a unix socket
//! (`redis+unix://`), or TLS (`rediss://`, `valkeys://`, feature `tls`).
//!
//! The URL is redis-rs's to parse; what this file adds is what the builder
//! promises about it: errors that never show a password (the parser's
//! message may quote the URL), the builder's certificates for a TLS URL,
//! and no TLS connection that skips the certificate checks (`#insecure`,
//! refused with [`ConfigError::InsecureTls`]). Its connections are plain
//! multiplexed ones, made by the node (see [`Endpoint`](super::Endpoint)).

use crate::error::ConfigError;

use super::redact::{redact, redact_all};
use super::url::is_tls;

/// Certificates for `rediss://` nodes, in PEM (the builder's
/// `tls_root_certificate` and `tls_client_certificate`; nothing without the
/// `tls` feature).
#[derive(Clone, Default)]
pub(crate) struct Tls {
    /// Trusted instead of the system's roots.
    #[cfg(feature = "tls")]
    pub(crate) root: Option<Vec<u8>>,
    /// The client's certificate chain and private key.
    #[cfg(feature = "tls")]
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

/// A client for `url`, with the certificates `tls` where it is a TLS URL.
pub(crate) fn client(url: &str, tls: &Tls) -> Result<redis::Client, ConfigError> {
    let invalid = |e: redis::RedisError| ConfigError::InvalidUrl {
        url: redact(url),
        reason: redact_all(&e.to_string(), url),
    };
    if !is_tls(url) {
        return redis::Client::open(url).map_err(invalid);
    }
    #[cfg(feature = "tls")]
    {
        install_crypto_provider();
        let client = if tls.root.is_some() || tls.client.is_some() {
            let certificates = redis::TlsCertificates {
                client_tls: tls.client.clone().map(|(client_cert, client_key)| {
                    redis::ClientTlsConfig {
                        client_cert,
                        client_key,
                    }
                }),
                root_cert: tls.root.clone(),
            };
            redis::Client::build_with_tls(url, certificates).map_err(invalid)?
        } else {
            redis::Client::open(url).map_err(invalid)?
        };
        // Told from what redis-rs parsed, not the URL's text: `#insecure`
        // is its one way to skip the checks, after the path or not.
        // This build of it could not make such a connection anyway
        // (every request would fail), and should not.
        if let redis::ConnectionAddr::TcpTls { insecure: true, .. } =
            client.get_connection_info().addr()
        {
            return Err(ConfigError::InsecureTls { url: redact(url) });
        }
        Ok(client)
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = tls;
        Err(ConfigError::TlsNotEnabled { url: redact(url) })
    }
}

/// redis-rs builds its rustls configuration on the process-wide crypto
/// provider, and rustls panics inside the connection where none can be
/// chosen (none installed, and no single provider enabled by the build's
/// features). Install `ring` unless one is installed already.
#[cfg(feature = "tls")]
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one meanwhile, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
