//! The TLS crypto provider every HTTP client of the bridge (MCP servers, OAuth) needs.

/// reqwest is built without its aws-lc provider: rustls' *ring* one is installed unless the
/// program installed its own (before any reqwest client is built).
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one in between, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
