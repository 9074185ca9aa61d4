//! The blob seam: somewhere to keep media too large to send inline, named by a reference the
//! model and the person can read.
//!
//! The dispatcher writes a tool result's media past the inline limit to a [`BlobStore`] and
//! gives the model a [`Part::Resource`](crate::Part::Resource) in its place: the URI, the
//! media type and the size, never the bytes. `tool-system`'s `FsBlobStore` keeps them in a
//! directory; implement the trait for anything else (an object store).

use serde::{Deserialize, Serialize};

/// The scheme of the references a [`BlobStore`] of this toolkit hands out:
/// `toolwright-blob:sha256:<64 lowercase hex digits>`.
pub const BLOB_URI_PREFIX: &str = "toolwright-blob:sha256:";

/// Media kept somewhere else than in the message: what a model is told instead of the bytes.
///
/// ```
/// use toolwright_core::{Part, ResourceRef};
/// let r = ResourceRef::new("toolwright-blob:sha256:ab12", "image/png", 31_457_280);
/// assert_eq!(
///     Part::Resource(r).placeholder(),
///     "[resource image/png, 31457280 bytes at toolwright-blob:sha256:ab12]"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResourceRef {
    /// Where the bytes are: a [`BlobStore`] reference, or a URI of the tool's own (an MCP
    /// server's `resource_link`).
    pub uri: String,
    /// Its IANA media type.
    pub media_type: String,
    /// Its size in bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// A file name, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ResourceRef {
    /// A reference to `size` bytes of `media_type` at `uri`.
    pub fn new(uri: impl Into<String>, media_type: impl Into<String>, size: u64) -> Self {
        Self {
            uri: uri.into(),
            media_type: media_type.into(),
            size: Some(size),
            name: None,
        }
    }

    /// A reference whose size is not known (a link to a resource elsewhere).
    pub fn link(uri: impl Into<String>, media_type: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            media_type: media_type.into(),
            size: None,
            name: None,
        }
    }

    /// The same reference with a file name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The content hash of a [`BlobStore`] reference (`toolwright-blob:sha256:<hex>`), checked:
    /// exactly 64 lowercase hex digits, nothing else. A reference of any other shape (a path,
    /// `../`, another scheme) is refused, so a store can build a file name from the result.
    pub fn blob_hash(uri: &str) -> Result<&str, BlobError> {
        let bad = |reason: &'static str| BlobError::BadReference {
            reference: uri.chars().take(200).collect(),
            reason,
        };
        let hash = uri
            .strip_prefix(BLOB_URI_PREFIX)
            .ok_or_else(|| bad("it is not a toolwright-blob:sha256: reference"))?;
        if hash.len() != 64 || !hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad("its hash is not 64 lowercase hex digits"));
        }
        Ok(hash)
    }
}

/// Bytes read back from a [`BlobStore`], with the media type they were stored as.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Blob {
    /// The media type given to [`BlobStore::put`].
    pub media_type: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl Blob {
    /// Bytes of `media_type`.
    pub fn new(media_type: impl Into<String>, bytes: Vec<u8>) -> Self {
        Self {
            media_type: media_type.into(),
            bytes,
        }
    }
}

/// Why a [`BlobStore`] could not keep or give back a blob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// The reference is not one this store hands out (a path, `../`, another scheme, a
    /// malformed hash): nothing was looked up.
    #[error("{reference:?} is not a blob reference: {reason}; use the URI a tool result gave")]
    BadReference {
        /// The reference given (its first 200 characters).
        reference: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A well-formed reference to nothing this store holds.
    #[error("no blob {uri} is stored here; it may have been removed")]
    NotFound {
        /// The reference.
        uri: String,
    },
    /// Keeping the blob would pass the store's size bound.
    #[error(
        "the blob store is full: {size} more bytes would pass its {limit}-byte bound ({used} used); free space or raise the bound"
    )]
    Full {
        /// The blob's size.
        size: u64,
        /// What the store already holds.
        used: u64,
        /// The store's bound.
        limit: u64,
    },
    /// A media type that cannot be stored (empty, not ASCII, a line break, over 255 bytes).
    #[error("{media_type:?} is not a media type a blob can be stored with; give its IANA type")]
    BadMediaType {
        /// The media type given.
        media_type: String,
    },
    /// The store's medium failed (a disk error); the message says what the system said.
    #[error("the blob store failed: {0}")]
    Io(String),
}

/// A place for bytes too large to travel inline: `put` keeps them and names them by a stable
/// reference (the same bytes and media type give the same reference), `get` gives them back.
/// Bounded: a store refuses what would pass its size bound with [`BlobError::Full`], and
/// refuses a reference it did not make with [`BlobError::BadReference`] before any lookup.
///
/// Configure one on an agent (`AgentBuilder::blob_store`) and a tool result's media past the
/// inline limit is kept there, the model given a [`Part::Resource`](crate::Part::Resource).
#[crate::async_trait]
pub trait BlobStore: Send + Sync {
    /// Keeps `bytes` of `media_type`; the reference the model and the person will see.
    async fn put(&self, bytes: &[u8], media_type: &str) -> Result<ResourceRef, BlobError>;
    /// The bytes and media type behind `uri`.
    async fn get(&self, uri: &str) -> Result<Blob, BlobError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_blob_reference_yields_a_hash() {
        let hex = "0123456789abcdef".repeat(4);
        let good = format!("{BLOB_URI_PREFIX}{hex}");
        assert_eq!(ResourceRef::blob_hash(&good).unwrap(), hex);
        for hostile in [
            "../../etc/passwd".to_owned(),
            "/etc/passwd".to_owned(),
            format!("{BLOB_URI_PREFIX}../../etc/passwd"),
            format!("{BLOB_URI_PREFIX}/etc/passwd"),
            format!("{BLOB_URI_PREFIX}{}", hex.to_uppercase()),
            format!("{BLOB_URI_PREFIX}{hex}/"),
            format!("{BLOB_URI_PREFIX}{}", &hex[..63]),
            format!("file://{hex}"),
        ] {
            assert!(
                matches!(
                    ResourceRef::blob_hash(&hostile),
                    Err(BlobError::BadReference { .. })
                ),
                "{hostile}"
            );
        }
    }
}
