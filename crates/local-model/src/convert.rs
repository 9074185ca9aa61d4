//! The converted-weights cache: a GGUF whose slow-kernel matrices are re-quantised to Q8_0,
//! written once next to the model and read back at the next start instead of converting again.
//!
//! The file is `<model file>.q8cache`: a small header (magic, the source file's size and
//! modification time, a checksum and the length of the payload) and the converted GGUF. A cache
//! whose source changed, whose checksum does not match, or that does not parse is rebuilt; it is
//! written to a temporary file and renamed into place, so a crash never leaves half a cache. A
//! directory that cannot be written only costs the conversion at every start.

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Result};

use crate::model::needs_requant;

const MAGIC: &[u8; 8] = b"LTKQ8C01";
const HEADER: usize = 8 + 8 + 8 + 4 + 8 + 8;

/// Where the converted weights of `model` are cached.
pub(crate) fn cache_path(model: &Path) -> PathBuf {
    let mut name = model.file_name().unwrap_or_default().to_os_string();
    name.push(".q8cache");
    model.with_file_name(name)
}

/// The source file's identity: size, and modification time as seconds and nanoseconds.
fn identity(model: &Path) -> std::io::Result<(u64, u64, u32)> {
    let m = std::fs::metadata(model)?;
    let t = m.modified()?.duration_since(UNIX_EPOCH).unwrap_or_default();
    Ok((m.len(), t.as_secs(), t.subsec_nanos()))
}

/// A fast checksum (four interleaved multiply-xor lanes over 64-bit words); it detects a
/// truncated, overwritten or bit-flipped cache, not an attacker.
pub(crate) fn checksum(data: &[u8]) -> u64 {
    const P: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [1u64, 2, 3, 4];
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        for (l, w) in lanes.iter_mut().zip(c.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            *l = (*l ^ u64::from_le_bytes(b)).wrapping_mul(P).rotate_left(29);
        }
    }
    let mut h = data.len() as u64;
    for l in lanes {
        h = (h ^ l).wrapping_mul(P).rotate_left(31);
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(P);
    }
    h
}

fn header(id: (u64, u64, u32), sum: u64, len: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&id.0.to_le_bytes());
    h[16..24].copy_from_slice(&id.1.to_le_bytes());
    h[24..28].copy_from_slice(&id.2.to_le_bytes());
    h[28..36].copy_from_slice(&sum.to_le_bytes());
    h[36..44].copy_from_slice(&len.to_le_bytes());
    h
}

/// The cached GGUF bytes of `model`, if a valid cache exists.
pub(crate) fn read_cache(model: &Path) -> Option<Vec<u8>> {
    let id = identity(model).ok()?;
    let mut data = std::fs::read(cache_path(model)).ok()?;
    if data.len() < HEADER || &data[..8] != MAGIC {
        return None;
    }
    let len = (data.len() - HEADER) as u64;
    let payload = &data[HEADER..];
    if data[..HEADER] != header(id, checksum(payload), len) {
        tracing::info!(cache = %cache_path(model).display(), "stale or damaged weight cache; rebuilding");
        return None;
    }
    data.drain(..HEADER);
    Some(data)
}

/// Writes the cache atomically; failure is reported to the log only.
pub(crate) fn write_cache(model: &Path, gguf: &[u8]) {
    let path = cache_path(model);
    let r = (|| -> std::io::Result<()> {
        let id = identity(model)?;
        // Unique per writer: loads in one process may race to write the same cache.
        static WRITER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("q8cache.tmp{}-{n}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&header(id, checksum(gguf), gguf.len() as u64))?;
            f.write_all(gguf)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        let r = write();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r
    })();
    if let Err(e) = r {
        tracing::warn!(cache = %path.display(), "cannot write the converted-weights cache ({e}); the model is converted again at the next start");
    }
}

/// The whole GGUF with the matrices no fast kernel reads (Q5_0, Q5_1) re-quantized to Q8_0:
/// 5-bit values are representable to within Q8_0's 8-bit step, so the answers barely move,
/// and matmuls run several times faster.
pub(crate) fn requantized(
    content: &gguf_file::Content,
    file: &mut (impl std::io::Read + std::io::Seek),
) -> Result<Vec<u8>> {
    requantized_where(content, file, needs_requant)
}

/// The whole GGUF with the matrices `pick` chooses re-quantized to Q8_0.
pub(crate) fn requantized_where(
    content: &gguf_file::Content,
    file: &mut (impl std::io::Read + std::io::Seek),
    pick: impl Fn(GgmlDType, &[usize]) -> bool,
) -> Result<Vec<u8>> {
    let device = &Device::Cpu;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(&str, QTensor)> = Vec::with_capacity(names.len());
    for name in names {
        let qt = content.tensor(file, name, device)?;
        let qt = if pick(qt.dtype(), qt.shape().dims()) {
            QTensor::quantize(&qt.dequantize(device)?, GgmlDType::Q8_0)?
        } else {
            qt
        };
        tensors.push((name.as_str(), qt));
    }
    let metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut mem = Cursor::new(Vec::new());
    gguf_file::write(&mut mem, &metadata, &refs)?;
    Ok(mem.into_inner())
}

#[cfg(test)]
mod tests {
    use super::checksum;

    #[test]
    fn the_checksum_sees_a_flipped_bit_and_a_cut() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let base = checksum(&data);
        for at in [0, 31, 32, 5000, 9999] {
            let mut d = data.clone();
            d[at] ^= 1;
            assert_ne!(checksum(&d), base, "flip at {at}");
        }
        assert_ne!(checksum(&data[..9999]), base);
        assert_eq!(checksum(&data), base);
    }
}
