//! [`FsBlobStore`]: a [`BlobStore`] in a directory, content-addressed and size-bounded.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use toolwright_core::{BLOB_URI_PREFIX, Blob, BlobError, BlobStore, ResourceRef, async_trait};

/// The longest media type a blob is stored with.
const MAX_MEDIA_TYPE: usize = 255;

/// A [`BlobStore`] in one directory: each blob is a file named by the SHA-256 of its media type
/// and bytes (the same bytes stored twice take the space once), holding its media type on the
/// first line and then the bytes. The files together stay within a bound given at
/// [`open`](Self::open); a put past it is [`BlobError::Full`]. A reference is checked to be
/// `toolwright-blob:sha256:` and 64 hex digits before any file name is made from it, so no
/// reference reaches outside the directory. Writes go to a temporary file renamed into place:
/// a reader never sees half a blob.
///
/// Space is given back two ways. [`evicting`](Self::evicting): a put past the bound removes the
/// least recently used blobs (stored or read longest ago) until the new one fits, instead of
/// being `Full`. [`remove_unused_since`](Self::remove_unused_since): an operator's sweep of
/// every blob not stored or read for a while. Blobs are shared by content across sessions, so
/// deleting a session does not delete them; a reference to a blob removed since is
/// [`BlobError::NotFound`] (the model is told it is gone; the panel answers 404).
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use toolwright_core::BlobStore;
/// use toolwright_tool_system::FsBlobStore;
/// let dir = std::env::temp_dir().join(format!("blobs-doc-{}", std::process::id()));
/// let store = FsBlobStore::open(&dir, 1024 * 1024)?;
/// let r = store.put(b"%PDF-1.7 ...", "application/pdf").await?;
/// assert!(r.uri.starts_with("toolwright-blob:sha256:"));
/// let back = store.get(&r.uri).await?;
/// assert_eq!((back.media_type.as_str(), back.bytes.as_slice()), ("application/pdf", &b"%PDF-1.7 ..."[..]));
/// assert!(store.get("../../etc/passwd").await.is_err());
/// # std::fs::remove_dir_all(&dir)?; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FsBlobStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    limit: u64,
    /// Whether a put past the bound removes the least recently used blobs.
    evicting: std::sync::atomic::AtomicBool,
    /// Bytes the blob files take; held while a put checks and writes, so that two puts cannot
    /// both pass the bound.
    used: Mutex<u64>,
}

impl FsBlobStore {
    /// A store in `dir` (made when missing) of at most `limit` bytes in all, counting the
    /// blobs already there. Leftovers of an interrupted write are removed.
    pub fn open(dir: impl Into<PathBuf>, limit: u64) -> Result<Self, BlobError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let mut used = 0u64;
        for entry in std::fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
            let entry = entry.map_err(|e| io(&dir, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".tmp-") {
                let _ = std::fs::remove_file(entry.path());
            } else if is_hash(&name) {
                used += entry.metadata().map_err(|e| io(&entry.path(), e))?.len();
            }
        }
        Ok(Self {
            inner: Arc::new(Inner {
                dir,
                limit,
                evicting: std::sync::atomic::AtomicBool::new(false),
                used: Mutex::new(used),
            }),
        })
    }

    /// This store, where a put past the bound removes the least recently used blobs until the
    /// new one fits (a blob larger than the whole bound is still `Full`).
    /// Every clone of the store evicts from then on.
    pub fn evicting(self) -> Self {
        self.inner
            .evicting
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Removes every blob not stored or read within `age`; the bytes given back.
    pub async fn remove_unused_since(&self, age: std::time::Duration) -> Result<u64, BlobError> {
        let inner = Arc::clone(&self.inner);
        run_blocking(move || {
            let mut used = lock(&inner.used);
            let cutoff = std::time::SystemTime::now()
                .checked_sub(age)
                .unwrap_or(std::time::UNIX_EPOCH);
            let mut freed = 0;
            for (path, size, last_used) in inner.blobs()? {
                if last_used < cutoff && std::fs::remove_file(&path).is_ok() {
                    freed += size;
                }
            }
            *used = used.saturating_sub(freed);
            Ok(freed)
        })
        .await
    }

    /// The directory the blobs are in.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The bytes the stored blobs take.
    pub fn used(&self) -> u64 {
        *lock(&self.inner.used)
    }
}

#[async_trait]
impl BlobStore for FsBlobStore {
    async fn put(&self, bytes: &[u8], media_type: &str) -> Result<ResourceRef, BlobError> {
        if media_type.is_empty()
            || media_type.len() > MAX_MEDIA_TYPE
            || !media_type
                .bytes()
                .all(|b| b.is_ascii_graphic() || b == b' ')
        {
            return Err(BlobError::BadMediaType {
                media_type: media_type.chars().take(MAX_MEDIA_TYPE).collect(),
            });
        }
        let mut hasher = Sha256::new();
        hasher.update(media_type.as_bytes());
        hasher.update(b"\n");
        hasher.update(bytes);
        let hash: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let size = bytes.len() as u64;
        let reference = ResourceRef::new(format!("{BLOB_URI_PREFIX}{hash}"), media_type, size);
        // The write is blocking file I/O of up to the store's bound: off the async threads.
        let inner = Arc::clone(&self.inner);
        let (bytes, media_type) = (bytes.to_vec(), media_type.to_owned());
        run_blocking(move || inner.write(&hash, &media_type, &bytes)).await?;
        Ok(reference)
    }

    async fn get(&self, uri: &str) -> Result<Blob, BlobError> {
        let hash = ResourceRef::blob_hash(uri)?;
        let path = self.inner.dir.join(hash);
        let uri = uri.to_owned();
        run_blocking(move || {
            let file = match std::fs::read(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(BlobError::NotFound { uri });
                }
                Err(e) => return Err(io(&path, e)),
            };
            let Some(line) = file.iter().position(|&b| b == b'\n') else {
                return Err(BlobError::Io(format!(
                    "{} has no media type line; remove it",
                    path.display()
                )));
            };
            // Read now: the last to go when space is needed.
            let _ = std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
            let media_type = String::from_utf8_lossy(&file[..line]).into_owned();
            let mut bytes = file;
            bytes.drain(..=line);
            Ok(Blob::new(media_type, bytes))
        })
        .await
    }
}

impl Inner {
    /// Writes one blob unless it is there already, within the bound.
    fn write(&self, hash: &str, media_type: &str, bytes: &[u8]) -> Result<(), BlobError> {
        let mut used = lock(&self.used);
        let path = self.dir.join(hash);
        if path.exists() {
            return Ok(());
        }
        let size = (media_type.len() + 1 + bytes.len()) as u64;
        if self.evicting.load(std::sync::atomic::Ordering::Relaxed)
            && size <= self.limit
            && used.saturating_add(size) > self.limit
        {
            *used = used.saturating_sub(self.evict(self.limit - size)?);
        }
        if used.saturating_add(size) > self.limit {
            return Err(BlobError::Full {
                size: bytes.len() as u64,
                used: *used,
                limit: self.limit,
            });
        }
        let tmp = self
            .dir
            .join(format!(".tmp-{hash}-{}", rand::random::<u64>()));
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(media_type.as_bytes())?;
            f.write_all(b"\n")?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(&path, e));
        }
        *used += size;
        Ok(())
    }

    /// Every blob file: its path, size and when it was last stored or read.
    fn blobs(&self) -> Result<Vec<(PathBuf, u64, std::time::SystemTime)>, BlobError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(|e| io(&self.dir, e))? {
            let Ok(entry) = entry else { continue };
            if !is_hash(&entry.file_name().to_string_lossy()) {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            let last_used = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
            out.push((entry.path(), meta.len(), last_used));
        }
        Ok(out)
    }

    /// Removes the least recently used blobs until at most `keep` bytes are left (of those
    /// counted now); the bytes removed. Called with `used` held.
    fn evict(&self, keep: u64) -> Result<u64, BlobError> {
        let mut blobs = self.blobs()?;
        blobs.sort_by_key(|(_, _, last_used)| *last_used);
        let mut left: u64 = blobs.iter().map(|(_, size, _)| size).sum();
        let mut freed = 0;
        for (path, size, _) in blobs {
            if left <= keep {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                left -= size;
                freed += size;
                tracing::debug!(blob = %path.display(), "blob store full: removed the least recently used blob");
            }
        }
        Ok(freed)
    }
}

/// Runs blocking file work on tokio's blocking threads.
async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BlobError> + Send + 'static,
) -> Result<T, BlobError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BlobError::Io(format!("the blob store's file task failed: {e}")))?
}

fn is_hash(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn io(path: &Path, e: std::io::Error) -> BlobError {
    BlobError::Io(format!("{}: {e}", path.display()))
}

fn lock(m: &Mutex<u64>) -> std::sync::MutexGuard<'_, u64> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(limit: u64) -> (tempfile::TempDir, FsBlobStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = FsBlobStore::open(dir.path().join("blobs"), limit).unwrap();
        (dir, s)
    }

    #[tokio::test]
    async fn the_same_bytes_give_the_same_reference_and_take_the_space_once() {
        let (_d, s) = store(1 << 20);
        let a = s.put(b"hello", "text/plain").await.unwrap();
        let used = s.used();
        let b = s.put(b"hello", "text/plain").await.unwrap();
        assert_eq!(a, b);
        assert_eq!(s.used(), used);
        assert_eq!(used, "text/plain\nhello".len() as u64);
        let other = s.put(b"hello", "application/octet-stream").await.unwrap();
        assert_ne!(
            other.uri, a.uri,
            "a media type of its own is a blob of its own"
        );
    }

    #[tokio::test]
    async fn hostile_references_are_refused_before_any_file_is_read() {
        let (d, s) = store(1 << 20);
        std::fs::write(d.path().join("secret"), "no").unwrap();
        for hostile in [
            "../../etc/passwd".to_owned(),
            "/etc/passwd".to_owned(),
            format!("{BLOB_URI_PREFIX}../secret"),
            format!("{BLOB_URI_PREFIX}/etc/passwd"),
            "toolwright-blob:sha256:".to_owned(),
        ] {
            assert!(
                matches!(s.get(&hostile).await, Err(BlobError::BadReference { .. })),
                "{hostile}"
            );
        }
        let unknown = format!("{BLOB_URI_PREFIX}{}", "0".repeat(64));
        assert_eq!(
            s.get(&unknown).await,
            Err(BlobError::NotFound { uri: unknown })
        );
    }

    #[tokio::test]
    async fn a_put_past_the_bound_is_refused_and_stores_nothing() {
        let (_d, s) = store(100);
        s.put(&[1; 60], "application/octet-stream").await.unwrap();
        let err = s
            .put(&[2; 60], "application/octet-stream")
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                BlobError::Full {
                    size: 60,
                    limit: 100,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(std::fs::read_dir(s.dir()).unwrap().count(), 1);
    }

    /// Sets a blob's last use `secs_ago` seconds back (file times are the store's clock).
    fn used_ago(s: &FsBlobStore, r: &ResourceRef, secs_ago: u64) {
        let path = s.dir().join(ResourceRef::blob_hash(&r.uri).unwrap());
        let at = std::time::SystemTime::now() - std::time::Duration::from_secs(secs_ago);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }

    #[tokio::test]
    async fn an_evicting_store_makes_room_by_removing_the_least_recently_used_blobs() {
        let (_d, s) = store(200);
        let s = s.evicting();
        let kind = "application/octet-stream"; // 25 bytes with its newline: 85 a blob
        let old = s.put(&[1; 60], kind).await.unwrap();
        let read = s.put(&[2; 60], kind).await.unwrap();
        used_ago(&s, &old, 300);
        used_ago(&s, &read, 200);
        // Reading a blob makes it the most recently used: `old` goes first.
        s.get(&read.uri).await.unwrap();
        let new = s.put(&[3; 60], kind).await.unwrap();
        assert_eq!(
            s.get(&old.uri).await,
            Err(BlobError::NotFound {
                uri: old.uri.clone()
            })
        );
        assert_eq!(s.get(&read.uri).await.unwrap().bytes, vec![2; 60]);
        assert_eq!(s.get(&new.uri).await.unwrap().bytes, vec![3; 60]);
        assert_eq!(s.used(), 170);
        // A blob larger than the whole bound is still refused, and removes nothing.
        assert!(matches!(
            s.put(&[4; 300], kind).await,
            Err(BlobError::Full { .. })
        ));
        assert_eq!(s.used(), 170);
    }

    #[tokio::test]
    async fn a_sweep_removes_the_blobs_unused_for_longer_than_the_age_given() {
        let (_d, s) = store(1 << 20);
        let stale = s.put(b"stale", "text/plain").await.unwrap();
        let fresh = s.put(b"fresh", "text/plain").await.unwrap();
        used_ago(&s, &stale, 7200);
        let freed = s
            .remove_unused_since(std::time::Duration::from_secs(3600))
            .await
            .unwrap();
        assert_eq!(freed, "text/plain\nstale".len() as u64);
        assert_eq!(s.used(), "text/plain\nfresh".len() as u64);
        assert!(s.get(&stale.uri).await.is_err());
        assert!(s.get(&fresh.uri).await.is_ok());
    }

    #[tokio::test]
    async fn a_media_type_that_cannot_be_a_header_is_refused() {
        let (_d, s) = store(1 << 20);
        for bad in ["", "text/plain\nX-Evil: 1", "bild/ä"] {
            assert!(matches!(
                s.put(b"x", bad).await,
                Err(BlobError::BadMediaType { .. })
            ));
        }
    }

    #[tokio::test]
    async fn a_reopened_store_counts_what_it_holds_and_drops_half_writes() {
        let (d, s) = store(1 << 20);
        let r = s.put(&[7; 1000], "image/png").await.unwrap();
        let used = s.used();
        std::fs::write(d.path().join("blobs/.tmp-abc-1"), [0; 10]).unwrap();
        let again = FsBlobStore::open(d.path().join("blobs"), 1 << 20).unwrap();
        assert_eq!(again.used(), used);
        assert!(!d.path().join("blobs/.tmp-abc-1").exists());
        assert_eq!(again.get(&r.uri).await.unwrap().bytes, vec![7; 1000]);
    }
}
