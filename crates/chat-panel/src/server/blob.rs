//! Media a tool gave by reference, served from the backend's blob store to the conversation's
//! owner (the media endpoint has checked who asks and that the reference is in their
//! conversation before it gets here).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use toolwright_core::{BlobError, ResourceRef};

use super::{App, error};

/// The bytes behind `r`, with the media type they were stored as; `404` for a reference the
/// store did not make or does not hold, or when the backend has no store. Never run by the
/// browser: a `sandbox` policy of its own and `nosniff`; only a picture or sound the panel
/// shows whose bytes are that type is `inline`, anything else an `attachment`
/// ([`crate::media::served_as`]).
pub(super) async fn serve(app: &App, session: &str, r: &ResourceRef) -> Response {
    let gone = || {
        error(
            StatusCode::NOT_FOUND,
            "no such file in this conversation (use the src of an entry's image)",
        )
    };
    let Some(store) = app.backend.blob_store() else {
        return gone();
    };
    let blob = match store.get(&r.uri).await {
        Ok(b) => b,
        Err(e @ (BlobError::NotFound { .. } | BlobError::BadReference { .. })) => {
            tracing::info!(session, uri = %r.uri, error = %e, "chat panel: a referenced file is not in the blob store");
            return gone();
        }
        Err(e) => {
            tracing::error!(session, uri = %r.uri, error = %e, "chat panel: the blob store failed");
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the file could not be read just now; try again shortly",
            );
        }
    };
    let (content_type, inline) = crate::media::served_as(&blob.media_type, &blob.bytes);
    contained(blob.bytes, content_type, inline)
}

/// Media from outside (a tool, a model, a person) as the panel serves it: never run by the
/// browser (a `sandbox` policy of its own, `nosniff`), readable by the panel's own pages only,
/// shown in place when `inline`, else downloaded.
pub(super) fn contained(
    bytes: impl IntoResponse,
    content_type: HeaderValue,
    inline: bool,
) -> Response {
    let mut resp = bytes.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, content_type);
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static(if inline { "inline" } else { "attachment" }),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::HeaderName::from_static("cross-origin-resource-policy"),
        HeaderValue::from_static("same-origin"),
    );
    resp
}
