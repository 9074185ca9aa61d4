//! The tools' vectors for search by meaning ([`crate::search::SemanticSearch`]): kept per
//! (encoder id, hash of the tool's text), so a catalog change encodes only the tools whose text
//! is new, and saved to a file so that a restart encodes nothing.
//!
//! The file, `tool-vectors-<FNV-1a of the encoder id, hex>.bin`, little-endian:
//! `"LTVEC1\n"`, u32 id length, the id (UTF-8), u32 dimensions, u64 count, then per vector u64
//! text hash and its f32 components. A file of another encoder, width or format is ignored
//! (and replaced on the next save); a damaged one too, with a warning.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8] = b"LTVEC1\n";
/// The most vectors one file keeps (about 15 MB at 384 dimensions): past it, the file holds
/// those of the current catalog only.
const MAX_SAVED: usize = 10_000;

/// Vectors of one encoder by text hash.
#[derive(Debug, Default)]
pub(crate) struct VectorCache {
    embedder_id: String,
    dims: usize,
    vectors: HashMap<u64, Arc<[f32]>>,
    file: Option<PathBuf>,
}

impl VectorCache {
    /// Makes this the cache of `embedder_id` (width `dims`) saved under `dir`: when it was
    /// another encoder's or another directory, it starts over from `dir`'s file.
    pub(crate) fn select(&mut self, embedder_id: &str, dims: usize, dir: Option<&Path>) {
        let file = dir.map(|d| {
            d.join(format!(
                "tool-vectors-{:016x}.bin",
                toolwright_tool_search::text_hash(embedder_id)
            ))
        });
        if self.embedder_id == embedder_id && self.dims == dims && self.file == file {
            return;
        }
        *self = Self {
            embedder_id: embedder_id.to_owned(),
            dims,
            vectors: HashMap::new(),
            file,
        };
        if let Some(path) = &self.file {
            match std::fs::read(path) {
                Ok(bytes) => match decode(&bytes, embedder_id, dims) {
                    Some(v) => self.vectors = v,
                    None => tracing::warn!(
                        path = %path.display(),
                        "tool vector cache is of another encoder, width or format, or damaged: ignored, the tools are encoded again"
                    ),
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), "tool vector cache unreadable ({e}): the tools are encoded again")
                }
            }
        }
    }

    pub(crate) fn get(&self, hash: u64) -> Option<Arc<[f32]>> {
        self.vectors.get(&hash).cloned()
    }

    pub(crate) fn insert(&mut self, hash: u64, vector: Vec<f32>) {
        self.vectors.insert(hash, vector.into());
    }

    /// What to write to the file (`None` without one): every vector, or past
    /// [`MAX_SAVED`] those of `current` only.
    pub(crate) fn snapshot(&self, current: &[u64]) -> Option<(PathBuf, Vec<u8>)> {
        let path = self.file.clone()?;
        let keep: Vec<(u64, &Arc<[f32]>)> = if self.vectors.len() <= MAX_SAVED {
            self.vectors.iter().map(|(h, v)| (*h, v)).collect()
        } else {
            current
                .iter()
                .filter_map(|h| self.vectors.get(h).map(|v| (*h, v)))
                .collect()
        };
        Some((path, encode(&self.embedder_id, self.dims, &keep)))
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so that a reader never sees
/// half a file. A failure is a warning: the vectors stay in memory.
pub(crate) fn save(path: &Path, bytes: &[u8]) {
    let result = (|| {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), "could not save the tool vectors ({e}); they are kept in memory for this run");
    }
}

fn encode(id: &str, dims: usize, vectors: &[(u64, &Arc<[f32]>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 16 + id.len() + vectors.len() * (8 + 4 * dims));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(id.len() as u32).to_le_bytes());
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(&(dims as u32).to_le_bytes());
    out.extend_from_slice(&(vectors.len() as u64).to_le_bytes());
    for (hash, v) in vectors {
        out.extend_from_slice(&hash.to_le_bytes());
        for x in v.iter() {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out
}

/// The vectors of a file of `id` and width `dims`; `None` for anything else.
fn decode(bytes: &[u8], id: &str, dims: usize) -> Option<HashMap<u64, Arc<[f32]>>> {
    let mut r = Reader(bytes);
    if r.take(MAGIC.len())? != MAGIC {
        return None;
    }
    let id_len = r.u32()? as usize;
    if r.take(id_len)? != id.as_bytes() || r.u32()? as usize != dims {
        return None;
    }
    let count = usize::try_from(r.u64()?).ok()?;
    // The rest must be exactly `count` entries.
    if r.0.len() != count.checked_mul(8 + 4 * dims)? {
        return None;
    }
    let mut out = HashMap::with_capacity(count);
    for _ in 0..count {
        let hash = r.u64()?;
        let v: Vec<f32> = r
            .take(4 * dims)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if v.iter().any(|x| !x.is_finite()) {
            return None;
        }
        out.insert(hash, v.into());
    }
    Some(out)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_cache_reads_back_and_rejects_other_encoders_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = VectorCache::default();
        c.select("enc-a", 3, Some(dir.path()));
        c.insert(7, vec![1.0, 2.0, 3.0]);
        c.insert(9, vec![0.5, -1.0, 0.0]);
        let (path, bytes) = c.snapshot(&[7, 9]).unwrap();
        save(&path, &bytes);

        let mut again = VectorCache::default();
        again.select("enc-a", 3, Some(dir.path()));
        assert_eq!(&*again.get(7).unwrap(), &[1.0, 2.0, 3.0]);
        assert_eq!(&*again.get(9).unwrap(), &[0.5, -1.0, 0.0]);
        // Same directory, other width: nothing reused.
        let mut wider = VectorCache::default();
        wider.select("enc-a", 4, Some(dir.path()));
        assert!(wider.get(7).is_none());
        // Other encoder: another file.
        let mut other = VectorCache::default();
        other.select("enc-b", 3, Some(dir.path()));
        assert!(other.get(7).is_none());
        // A cut file is ignored, not half read.
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let mut cut = VectorCache::default();
        cut.select("enc-a", 3, Some(dir.path()));
        assert!(cut.get(7).is_none());
        // No directory: memory only.
        let mut mem = VectorCache::default();
        mem.select("enc-a", 3, None);
        mem.insert(1, vec![1.0; 3]);
        assert!(mem.snapshot(&[1]).is_none());
    }
}
