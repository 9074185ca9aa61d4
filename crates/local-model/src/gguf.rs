//! The GGUF file format, read: the header, the metadata and the tensor directory, then each
//! tensor's bytes on demand (see llama.cpp's `docs/gguf.md`; versions 2 and 3).
//!
//! Written for files from anywhere: every count and length is checked against what is left of
//! the file before anything is allocated, so a damaged or hostile file is a [`GgufError`],
//! never a panic or an out-of-memory. The tensors' bytes are turned into the kernels' weights by
//! [`crate::kernels::Weight::from_gguf_bytes`], which knows every type listed in [`GgmlType`].

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};

/// Why a GGUF file cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// Reading the file failed.
    #[error("cannot read the GGUF file: {0}")]
    Io(#[from] std::io::Error),
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file (it starts with {0:02x?}); give the path of a .gguf model")]
    Magic([u8; 4]),
    /// A version this reader does not know.
    #[error(
        "GGUF version {0} is not supported (2 and 3 are); convert the model with a current llama.cpp"
    )]
    Version(u32),
    /// The file contradicts itself or ends early.
    #[error("the GGUF file is damaged ({0}); fetch it again")]
    Corrupt(String),
    /// A tensor type no reader here knows (ggml's number).
    #[error(
        "tensor `{name}` has ggml type {id}, which this crate does not read (it reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K); use a file quantised to one of those, e.g. Q4_K_M or Q8_0"
    )]
    UnsupportedType {
        /// The tensor.
        name: String,
        /// ggml's type number.
        id: u32,
    },
    /// A tensor or metadata key the model needs is missing or has the wrong type.
    #[error("{0}")]
    Missing(String),
}

/// The tensor types this crate reads (ggml's numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GgmlType {
    /// 32-bit floats.
    F32,
    /// IEEE half floats.
    F16,
    /// bfloat16.
    BF16,
    /// 4 bits, one f16 scale per 32 values.
    Q4_0,
    /// 4 bits, an f16 scale and minimum per 32 values.
    Q4_1,
    /// 5 bits, one f16 scale per 32 values.
    Q5_0,
    /// 5 bits, an f16 scale and minimum per 32 values.
    Q5_1,
    /// 8 bits, one f16 scale per 32 values.
    Q8_0,
    /// K-quant, 4 bits in super-blocks of 256 with 6-bit scales and minima per 32.
    Q4K,
    /// K-quant, 5 bits, as Q4_K.
    Q5K,
    /// K-quant, 6 bits in super-blocks of 256 with 8-bit scales per 16.
    Q6K,
}

impl GgmlType {
    /// From ggml's type number.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            30 => Self::BF16,
            _ => return None,
        })
    }

    /// ggml's type number.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::BF16 => 30,
        }
    }

    /// Values per block and bytes per block.
    pub fn block(self) -> (usize, usize) {
        match self {
            Self::F32 => (1, 4),
            Self::F16 | Self::BF16 => (1, 2),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q5_0 => (32, 22),
            Self::Q5_1 => (32, 24),
            Self::Q8_0 => (32, 34),
            Self::Q4K => (256, 144),
            Self::Q5K => (256, 176),
            Self::Q6K => (256, 210),
        }
    }

    /// The bytes `n` values take, if `n` is a whole number of blocks and that many bytes can
    /// be counted (a corrupt shape may claim more than `usize` holds).
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        let (per, size) = self.block();
        if !n.is_multiple_of(per) {
            return None;
        }
        (n / per).checked_mul(size)
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

fn wrong(what: &str, v: &Value) -> GgufError {
    GgufError::Missing(format!("a metadata value is {v:?}, not {what}"))
}

impl Value {
    /// Any integer that fits a `u32`.
    pub fn to_u32(&self) -> Result<u32, GgufError> {
        let n: Option<u32> = match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v),
            Self::I8(v) => v.try_into().ok(),
            Self::I16(v) => v.try_into().ok(),
            Self::I32(v) => v.try_into().ok(),
            Self::U64(v) => v.try_into().ok(),
            Self::I64(v) => v.try_into().ok(),
            _ => None,
        };
        n.ok_or_else(|| wrong("an unsigned 32-bit integer", self))
    }

    /// Any integer that fits an `i32`.
    pub fn to_i32(&self) -> Result<i32, GgufError> {
        let n: Option<i32> = match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v),
            Self::U32(v) => v.try_into().ok(),
            Self::U64(v) => v.try_into().ok(),
            Self::I64(v) => v.try_into().ok(),
            _ => None,
        };
        n.ok_or_else(|| wrong("a 32-bit integer", self))
    }

    /// A float (an f64 is narrowed).
    pub fn to_f32(&self) -> Result<f32, GgufError> {
        match *self {
            Self::F32(v) => Ok(v),
            Self::F64(v) => Ok(v as f32),
            _ => Err(wrong("a float", self)),
        }
    }

    pub fn to_bool(&self) -> Result<bool, GgufError> {
        match *self {
            Self::Bool(v) => Ok(v),
            _ => Err(wrong("a boolean", self)),
        }
    }

    pub fn to_string(&self) -> Result<&String, GgufError> {
        match self {
            Self::String(v) => Ok(v),
            _ => Err(wrong("a string", self)),
        }
    }

    pub fn to_vec(&self) -> Result<&Vec<Value>, GgufError> {
        match self {
            Self::Array(v) => Ok(v),
            _ => Err(wrong("an array", self)),
        }
    }
}

/// Where a tensor is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TensorInfo {
    pub dtype: GgmlType,
    /// Outermost first (rows, then columns), the reverse of the file's order.
    pub dims: Vec<usize>,
    /// From the start of the file.
    pub offset: u64,
    /// Bytes of data.
    pub size: usize,
}

/// A GGUF file's metadata and tensor directory.
#[derive(Debug, Clone)]
pub(crate) struct Content {
    pub metadata: HashMap<String, Value>,
    pub tensor_infos: HashMap<String, TensorInfo>,
}

/// The most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;
/// How deep arrays of arrays may nest.
const MAX_DEPTH: u32 = 2;

/// A reader that knows how many bytes are left.
struct Src<'r, R> {
    r: &'r mut R,
    left: u64,
}

impl<R: Read> Src<'_, R> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        self.need(N as u64, "a value")?;
        let mut b = [0u8; N];
        self.r.read_exact(&mut b)?;
        Ok(b)
    }

    fn need(&mut self, n: u64, what: &str) -> Result<(), GgufError> {
        if n > self.left {
            return Err(GgufError::Corrupt(format!(
                "{what} of {n} bytes runs past the end of the file"
            )));
        }
        self.left -= n;
        Ok(())
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn string(&mut self) -> Result<String, GgufError> {
        let n = self.u64()?;
        self.need(n, "a string")?;
        let mut b = vec![0u8; n as usize];
        self.r.read_exact(&mut b)?;
        // Lossy: some converters write vocabularies with stray bytes; a token's text then
        // differs from its bytes only where the file was already wrong.
        Ok(String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into()))
    }

    fn value(&mut self, ty: u32, depth: u32) -> Result<Value, GgufError> {
        Ok(match ty {
            0 => Value::U8(u8::from_le_bytes(self.take()?)),
            1 => Value::I8(i8::from_le_bytes(self.take()?)),
            2 => Value::U16(u16::from_le_bytes(self.take()?)),
            3 => Value::I16(i16::from_le_bytes(self.take()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.take()?)),
            6 => Value::F32(f32::from_le_bytes(self.take()?)),
            7 => Value::Bool(u8::from_le_bytes(self.take()?) != 0),
            8 => Value::String(self.string()?),
            9 if depth < MAX_DEPTH => {
                let inner = self.u32()?;
                let n = self.u64()?;
                // Every element takes at least one byte: a count past the bytes left is a lie.
                if n > self.left {
                    return Err(GgufError::Corrupt(format!(
                        "an array of {n} values in a file with {} bytes left",
                        self.left
                    )));
                }
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    v.push(self.value(inner, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.take()?)),
            12 => Value::F64(f64::from_le_bytes(self.take()?)),
            t => {
                return Err(GgufError::Corrupt(format!(
                    "unknown metadata value type {t}"
                )));
            }
        })
    }
}

impl Content {
    /// Reads the header, metadata and tensor directory (not the tensors) from the start of `r`.
    pub fn read<R: Read + Seek>(r: &mut R) -> Result<Self, GgufError> {
        let len = r.seek(SeekFrom::End(0))?;
        r.seek(SeekFrom::Start(0))?;
        let mut s = Src { r, left: len };
        let magic: [u8; 4] = s.take().map_err(|_| GgufError::Magic([0; 4]))?;
        if &magic != b"GGUF" {
            return Err(GgufError::Magic(magic));
        }
        let version = s.u32()?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version(version));
        }
        let n_tensors = s.u64()?;
        let n_kv = s.u64()?;
        let mut metadata = HashMap::new();
        for _ in 0..n_kv {
            let key = s.string()?;
            let ty = s.u32()?;
            let v = s.value(ty, 0)?;
            metadata.insert(key, v);
        }
        let mut infos = Vec::new();
        for _ in 0..n_tensors {
            let name = s.string()?;
            let n_dims = s.u32()?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(GgufError::Corrupt(format!(
                    "tensor `{name}` has {n_dims} dimensions"
                )));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                let d = usize::try_from(s.u64()?).ok();
                dims.push(
                    d.ok_or_else(|| GgufError::Corrupt(format!("tensor `{name}` is too large")))?,
                );
            }
            dims.reverse();
            let id = s.u32()?;
            let offset = s.u64()?;
            infos.push((name, dims, id, offset));
        }
        let alignment = match metadata.get("general.alignment") {
            Some(v) => u64::from(v.to_u32()?),
            None => 32,
        };
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(GgufError::Corrupt(format!("alignment {alignment}")));
        }
        let data = (len - s.left).div_ceil(alignment) * alignment;
        let mut tensor_infos = HashMap::with_capacity(infos.len());
        for (name, dims, id, offset) in infos {
            let Some(dtype) = GgmlType::from_id(id) else {
                // Listed but not loadable: fails only if the model asks for it.
                tensor_infos.insert(
                    name.clone(),
                    TensorInfo {
                        dtype: GgmlType::F32,
                        dims: Vec::new(),
                        offset: u64::MAX,
                        size: id as usize,
                    },
                );
                continue;
            };
            let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            let size = n.and_then(|n| dtype.bytes_for(n)).ok_or_else(|| {
                GgufError::Corrupt(format!(
                    "tensor `{name}` of shape {dims:?} is not a whole number of {dtype:?} blocks, or more bytes than can be counted"
                ))
            })?;
            let start = data.checked_add(offset);
            if start
                .and_then(|s| s.checked_add(size as u64))
                .is_none_or(|end| end > len)
            {
                return Err(GgufError::Corrupt(format!(
                    "tensor `{name}` lies past the end of the file"
                )));
            }
            tensor_infos.insert(
                name,
                TensorInfo {
                    dtype,
                    dims,
                    offset: data + offset,
                    size,
                },
            );
        }
        Ok(Self {
            metadata,
            tensor_infos,
        })
    }

    /// A tensor's directory entry.
    pub fn info(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        let t = self
            .tensor_infos
            .get(name)
            .ok_or_else(|| GgufError::Missing(format!("the GGUF file has no tensor `{name}`")))?;
        if t.offset == u64::MAX {
            return Err(GgufError::UnsupportedType {
                name: name.to_owned(),
                id: t.size as u32,
            });
        }
        Ok(t)
    }

    /// A tensor's type, shape and bytes.
    pub fn tensor<R: Read + Seek>(
        &self,
        r: &mut R,
        name: &str,
    ) -> Result<(TensorInfo, Vec<u8>), GgufError> {
        let t = self.info(name)?;
        r.seek(SeekFrom::Start(t.offset))?;
        let mut b = vec![0u8; t.size];
        r.read_exact(&mut b)?;
        Ok((t.clone(), b))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A small GGUF: the given metadata (key, type, encoded value) and F32 tensors.
    pub(crate) fn file(
        kvs: &[(&str, u32, Vec<u8>)],
        tensors: &[(&str, &[usize], &[f32])],
    ) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((tensors.len() as u64).to_le_bytes());
        b.extend((kvs.len() as u64).to_le_bytes());
        let s = |b: &mut Vec<u8>, t: &str| {
            b.extend((t.len() as u64).to_le_bytes());
            b.extend(t.as_bytes());
        };
        for (k, ty, v) in kvs {
            s(&mut b, k);
            b.extend(ty.to_le_bytes());
            b.extend(v);
        }
        let mut off = 0u64;
        for (name, dims, v) in tensors {
            s(&mut b, name);
            b.extend((dims.len() as u32).to_le_bytes());
            for d in dims.iter().rev() {
                b.extend((*d as u64).to_le_bytes());
            }
            b.extend(0u32.to_le_bytes());
            b.extend(off.to_le_bytes());
            off += (v.len() * 4).div_ceil(32) as u64 * 32;
        }
        while !b.len().is_multiple_of(32) {
            b.push(0);
        }
        for (_, _, v) in tensors {
            let start = b.len();
            b.extend(v.iter().flat_map(|x| x.to_le_bytes()));
            while !(b.len() - start).is_multiple_of(32) {
                b.push(0);
            }
        }
        b
    }

    fn string(t: &str) -> Vec<u8> {
        let mut b = (t.len() as u64).to_le_bytes().to_vec();
        b.extend(t.as_bytes());
        b
    }

    #[test]
    fn reads_metadata_of_every_type_and_a_tensor() {
        let mut arr = 8u32.to_le_bytes().to_vec();
        arr.extend(2u64.to_le_bytes());
        arr.extend(string("a"));
        arr.extend(string("bc"));
        let f = file(
            &[
                ("u32", 4, 7u32.to_le_bytes().to_vec()),
                ("i32", 5, (-3i32).to_le_bytes().to_vec()),
                ("f32", 6, 0.5f32.to_le_bytes().to_vec()),
                ("bool", 7, vec![1]),
                ("s", 8, string("llama")),
                ("arr", 9, arr),
                ("u64", 10, 9u64.to_le_bytes().to_vec()),
            ],
            &[("w", &[2, 3], &[1., 2., 3., 4., 5., 6.])],
        );
        let mut r = std::io::Cursor::new(f);
        let c = Content::read(&mut r).unwrap();
        assert_eq!(c.metadata["u32"].to_u32().unwrap(), 7);
        assert_eq!(c.metadata["u64"].to_u32().unwrap(), 9);
        assert_eq!(c.metadata["i32"].to_i32().unwrap(), -3);
        assert!(c.metadata["i32"].to_u32().is_err());
        assert_eq!(c.metadata["f32"].to_f32().unwrap(), 0.5);
        assert!(c.metadata["bool"].to_bool().unwrap());
        assert_eq!(c.metadata["s"].to_string().unwrap(), "llama");
        assert_eq!(c.metadata["arr"].to_vec().unwrap().len(), 2);
        let (info, bytes) = c.tensor(&mut r, "w").unwrap();
        assert_eq!(
            (info.dtype, info.dims.as_slice()),
            (GgmlType::F32, &[2, 3][..])
        );
        assert_eq!(bytes[4..8], 2f32.to_le_bytes());
        assert!(matches!(
            c.tensor(&mut r, "nope"),
            Err(GgufError::Missing(_))
        ));
    }

    #[test]
    fn a_damaged_file_is_an_error_not_a_panic_or_a_huge_allocation() {
        let good = file(&[("s", 8, string("x"))], &[("w", &[1, 32], &[0.0; 32])]);
        // Every truncation.
        for n in 0..good.len() {
            assert!(
                Content::read(&mut std::io::Cursor::new(&good[..n])).is_err(),
                "cut at {n}"
            );
        }
        assert!(Content::read(&mut std::io::Cursor::new(&good)).is_ok());
        // A string that claims 2^60 bytes, an array that claims 2^60 values.
        let mut huge = good.clone();
        huge[24..32].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(matches!(
            Content::read(&mut std::io::Cursor::new(&huge)),
            Err(GgufError::Corrupt(_))
        ));
        let mut arr = 4u32.to_le_bytes().to_vec();
        arr.extend((1u64 << 60).to_le_bytes());
        let f = file(&[("a", 9, arr)], &[]);
        assert!(matches!(
            Content::read(&mut std::io::Cursor::new(&f)),
            Err(GgufError::Corrupt(_))
        ));
        assert!(matches!(
            Content::read(&mut std::io::Cursor::new(b"GGML0000".to_vec())),
            Err(GgufError::Magic(_))
        ));
    }

    /// Pinned from the proptest below (CI, 2026-11-27: `flips = [(87, 32)]`): one byte of the
    /// tensor's shape made 2^37-ish values of F32, whose byte count overflowed `usize` in
    /// `bytes_for` — a panic, not a refusal.
    #[test]
    fn a_shape_whose_bytes_overflow_is_refused_not_a_panic() {
        let mut f = file(
            &[
                ("s", 8, string("hello")),
                ("n", 4, 3u32.to_le_bytes().to_vec()),
            ],
            &[("w", &[2, 32], &[1.0; 64])],
        );
        let at = 87 % f.len();
        f[at] = 32;
        let _ = Content::read(&mut std::io::Cursor::new(&f));
        assert_eq!(GgmlType::F32.bytes_for(usize::MAX / 2), None);
        assert_eq!(GgmlType::Q8_0.bytes_for(usize::MAX / 32 * 32), None);
        assert_eq!(GgmlType::Q4_0.bytes_for(64), Some(36));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_after_the_magic_are_read_or_refused_without_panicking(
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            flips in proptest::collection::vec((0usize..200, proptest::prelude::any::<u8>()), 0..6),
        ) {
            let mut f = file(
                &[("s", 8, string("hello")), ("n", 4, 3u32.to_le_bytes().to_vec())],
                &[("w", &[2, 32], &[1.0; 64])],
            );
            for (at, v) in flips {
                let at = at % f.len();
                f[at] = v;
            }
            let _ = Content::read(&mut std::io::Cursor::new(&f));
            let mut g = b"GGUF\x03\0\0\0".to_vec();
            g.extend(tail);
            let _ = Content::read(&mut std::io::Cursor::new(&g));
        }
    }
}
