//! GGUF → weights: the hyper-parameters from the metadata, every tensor brought to this
//! crate's kernels (Q4_1, Q8_0 or F32), checked against the shape the forward pass expects.

use std::io::{Read, Seek};
use std::sync::Arc;

use super::{Arch, Config, Embedding, Fault, Layer, Linear, Result, Rope, Weights};
use crate::gguf::{Content, GgufError};
use crate::kernels::{self, Weight};

/// A 2-D tensor as a kernel weight.
pub(super) fn matrix<R: Read + Seek>(ct: &Content, r: &mut R, name: &str) -> Result<Arc<Weight>> {
    let (t, bytes) = ct.tensor(r, name)?;
    let [rows, cols] = t.dims[..] else {
        bail!("tensor `{name}` has shape {:?}, expected a matrix", t.dims);
    };
    Ok(Arc::new(Weight::from_gguf_bytes(
        t.dtype, rows, cols, &bytes,
    )?))
}

/// A tensor's values as f32 (norm weights).
fn vector<R: Read + Seek>(ct: &Content, r: &mut R, name: &str) -> Result<Vec<f32>> {
    let (t, bytes) = ct.tensor(r, name)?;
    Ok(kernels::dequantize(t.dtype, &bytes))
}

fn md_u32(ct: &Content, key: &str) -> Result<usize> {
    match ct.metadata.get(key) {
        Some(v) => Ok(v.to_u32()? as usize),
        None => bail!("cannot find {key} in the GGUF metadata"),
    }
}

impl Weights {
    /// Reads a llama-architecture GGUF (the same keys candle's `quantized_llama` reads) or a
    /// Gemma 3 one.
    pub(crate) fn from_gguf<R: Seek + Read>(ct: &Content, reader: &mut R) -> Result<Self> {
        let arch = ct
            .metadata
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_else(|| "llama".into());
        let kind = match arch.as_str() {
            "gemma3" => Arch::Gemma3,
            a if a.starts_with("gemma") => {
                bail!("architecture `{a}` is not supported (gemma3 is)")
            }
            _ => Arch::Llama,
        };
        let key = |k: &str| format!("{arch}.{k}");
        let n_head = md_u32(ct, &key("attention.head_count"))?;
        let n_kv_head = md_u32(ct, &key("attention.head_count_kv"))?;
        let n_layer = md_u32(ct, &key("block_count"))?;
        let dim = md_u32(ct, &key("embedding_length"))?;
        // Gemma's heads have a size of their own (4 × 256 against a width of 640).
        let head_dim = match kind {
            Arch::Gemma3 => md_u32(ct, &key("attention.key_length"))?,
            Arch::Llama => {
                if n_head == 0 || dim % n_head != 0 {
                    bail!("unsupported head layout: {n_head} heads for width {dim}");
                }
                dim / n_head
            }
        };
        let rope_dim = match kind {
            Arch::Gemma3 => md_u32(ct, &key("rope.dimension_count")).unwrap_or(head_dim),
            Arch::Llama => md_u32(ct, &key("rope.dimension_count"))?,
        };
        let eps = match ct.metadata.get(&key("attention.layer_norm_rms_epsilon")) {
            Some(v) => v.to_f32()?,
            None => bail!("cannot find the RMS norm epsilon in the GGUF metadata"),
        };
        let freq_base = ct
            .metadata
            .get(&key("rope.freq_base"))
            .and_then(|v| v.to_f32().ok())
            .unwrap_or(10000.0);
        if n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 || head_dim == 0 {
            bail!("unsupported head layout: {n_head} heads, {n_kv_head} KV heads");
        }
        if rope_dim > head_dim || rope_dim % 2 != 0 {
            bail!("unsupported RoPE dimension {rope_dim}");
        }
        // As candle's quantized_llama (after llama.cpp's llama_model_rope_type).
        let rope_neox = matches!(
            arch.as_str(),
            "qwen"
                | "qwen2"
                | "qwen2moe"
                | "qwen3"
                | "qwen3moe"
                | "falcon"
                | "grok"
                | "dbrx"
                | "phi2"
                | "phi3"
                | "phimoe"
                | "stablelm"
                | "starcoder2"
                | "olmo2"
                | "olmoe"
                | "codeshell"
                | "plamo"
                | "gemma3"
        );
        if ct
            .metadata
            .get(&key("expert_count"))
            .is_some_and(|v| v.to_u32().is_ok_and(|n| n > 1))
        {
            bail!("mixture-of-experts models are not supported");
        }
        let mut ropes = vec![Rope::new(rope_dim, freq_base)];
        // Gemma 3: every sixth layer is global, the others see a window with a local RoPE base
        // (llama.cpp's `set_swa_pattern(6)`).
        let sliding = if kind == Arch::Gemma3 {
            let window = md_u32(ct, &key("attention.sliding_window"))?;
            let local_base = ct
                .metadata
                .get(&key("rope.local_freq_base"))
                .and_then(|v| v.to_f32().ok())
                .unwrap_or(10_000.0);
            ropes.push(Rope::new(rope_dim, local_base));
            Some(window)
        } else {
            None
        };
        let emb = ct.info("token_embd.weight")?;
        let [vocab, emb_dim] = emb.dims[..] else {
            bail!("token_embd.weight has shape {:?}", emb.dims);
        };
        if emb_dim != dim {
            bail!("token_embd.weight is {vocab}×{emb_dim}, expected ×{dim}");
        }
        let norm = vector(ct, reader, "output_norm.weight")?;
        let output = match ct.info("output.weight") {
            Ok(_) => Some(Linear(matrix(ct, reader, "output.weight")?)),
            Err(GgufError::Missing(_)) => None,
            Err(e) => return Err(e.into()),
        };
        let (embedding, output) = if dim.is_multiple_of(kernels::BLOCK) {
            let w = matrix(ct, reader, "token_embd.weight")?;
            // Tied: the output projection is the embedding table, held once.
            let out = output.unwrap_or_else(|| Linear(Arc::clone(&w)));
            (Embedding::Kernel(w), out)
        } else {
            match output {
                Some(out) => (
                    Embedding::F32(vector(ct, reader, "token_embd.weight")?),
                    out,
                ),
                None => bail!("a model {dim} wide must have its own output.weight"),
            }
        };
        let mut layers = Vec::with_capacity(n_layer);
        for i in 0..n_layer {
            let name = |n: &str| format!("blk.{i}.{n}.weight");
            let local = sliding.filter(|_| i % 6 < 5);
            let gemma = kind == Arch::Gemma3;
            let mut norm = |n: &str| -> Result<Option<Vec<f32>>> {
                if gemma {
                    Ok(Some(vector(ct, reader, &name(n))?))
                } else {
                    Ok(None)
                }
            };
            let q_norm = norm("attn_q_norm")?;
            let k_norm = norm("attn_k_norm")?;
            let post_attn_norm = norm("post_attention_norm")?;
            let post_ffn_norm = norm("post_ffw_norm")?;
            if q_norm.as_ref().is_some_and(|w| w.len() != head_dim)
                || k_norm.as_ref().is_some_and(|w| w.len() != head_dim)
            {
                bail!("layer {i}: the query/key norms are not {head_dim} wide");
            }
            layers.push(Layer {
                rope: usize::from(local.is_some()),
                window: local,
                q_norm,
                k_norm,
                post_attn_norm,
                post_ffn_norm,
                wq: Linear(matrix(ct, reader, &name("attn_q"))?),
                wk: Linear(matrix(ct, reader, &name("attn_k"))?),
                wv: Linear(matrix(ct, reader, &name("attn_v"))?),
                wo: Linear(matrix(ct, reader, &name("attn_output"))?),
                w_gate: Linear(matrix(ct, reader, &name("ffn_gate"))?),
                w_down: Linear(matrix(ct, reader, &name("ffn_down"))?),
                w_up: Linear(matrix(ct, reader, &name("ffn_up"))?),
                attn_norm: vector(ct, reader, &name("attn_norm"))?,
                ffn_norm: vector(ct, reader, &name("ffn_norm"))?,
            });
        }
        Ok(Self {
            cfg: Config {
                arch: kind,
                n_layer,
                dim,
                n_head,
                n_kv_head,
                head_dim,
                rope_dim,
                eps,
                rope_neox,
            },
            embedding,
            vocab,
            layers,
            norm,
            output,
            ropes,
        })
    }
}
