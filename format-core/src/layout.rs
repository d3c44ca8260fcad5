//! Fixed sizes, magic numbers and resource limits: the single source of truth
//! for the byte layout (see `spec/`).

/// The five magic bytes every tensorizer file starts with: ASCII `|TZR|`.
pub const MAGIC: [u8; 5] = *b"|TZR|";

/// Length of the fixed file header: magic (5), version (4), feature flags
/// (32), tensor data total (8), padding (8), tensor count (8) and the
/// metadata index length (8). The metadata index starts right after it.
pub const FILE_HEADER_LEN: usize = 73;

/// Offset of the metadata index in every file.
pub const METADATA_OFFSET: u64 = FILE_HEADER_LEN as u64;

/// The metadata reservation tensorizer always writes (256 KiB, zero-filled).
pub const TENSORIZER_METADATA_LEN: u64 = 256 * 1024;

/// Size of the end-of-file marker: a zero `u64` "header length".
pub const END_MARKER_LEN: u64 = 8;

/// Default data alignment for files written by tensorizer-rs.
pub const DEFAULT_ALIGNMENT: u64 = 64;

/// Largest alignment a writer accepts (one huge page).
pub const MAX_ALIGNMENT: u64 = 2 * 1024 * 1024;

/// The encryption chunk size tensorizer's writer always uses (2 MiB).
pub const CRYPT_CHUNK_SIZE: u64 = 2 << 20;

/// Encryption chunk sizes must be a multiple of this many bytes.
pub const CRYPT_CHUNK_QUANTUM: u64 = 64;

/// Smallest encryption chunk size a reader accepts.
pub const MIN_CRYPT_CHUNK_SIZE: u64 = 1024;

/// Length of a secretbox key.
pub const KEY_LEN: usize = 32;

/// Length of an XSalsa20 nonce.
pub const NONCE_LEN: usize = 24;

/// Length of a Poly1305 tag.
pub const MAC_LEN: usize = 16;

/// Length of an Argon2id salt as libsodium uses it.
pub const SALT_LEN: usize = 16;

/// libsodium's `crypto_pwhash_ALG_ARGON2ID13`.
pub const PWHASH_ALG_ARGON2ID13: i32 = 2;

/// Feature flag bit 0: every tensor header carries a crypt-info block.
pub const FLAG_ENCRYPTED: u8 = 1;

/// Feature flag bit 1: every metadata entry starts with a u32 version tag.
pub const FLAG_VERSIONED_HEADERS: u8 = 2;

/// Metadata tag of an entry with 32-bit dimensions.
pub const METADATA_TAG_SHORT: u32 = 1;

/// Metadata tag of an entry with 64-bit dimensions.
pub const METADATA_TAG_LONG: u32 = 5;

// ---- resource limits: checked before any work or allocation -------------

/// Longest tensor header a reader accepts. A header holds 16 bytes of MAC
/// per 2 MiB of data, so this admits encrypted tensors of several TiB.
pub const MAX_TENSOR_HEADER_LEN: u64 = 64 * 1024 * 1024;

/// Longest metadata index a reader accepts (hosts also check the file size).
pub const MAX_METADATA_LEN: u64 = 1024 * 1024 * 1024;

/// Longest tensor name (the name length is a u16 on disk).
pub const MAX_NAME_LEN: usize = u16::MAX as usize;

/// Longest dtype string (the length is a u8 on disk).
pub const MAX_DTYPE_LEN: usize = u8::MAX as usize;

/// Most dimensions a tensor may have (the count is a u8 on disk).
pub const MAX_NDIM: usize = u8::MAX as usize;

/// Most components one structured tensor path may have. Real state dicts
/// nest a handful of levels; the cap keeps every walk of a path cheap and
/// lets hosts recurse nowhere near the stack's end.
pub const MAX_PATH_DEPTH: usize = 1024;

/// Most path components summed over every tensor of one file (a plain
/// name counts as one). Bounds the memory conflict detection needs.
pub const MAX_PATH_COMPONENTS: u64 = 1 << 21;

/// Most tensors one file may declare. Readers refuse more, so the writer
/// refuses to write more ([`crate::write::check_tensor_count`]).
pub const MAX_TENSORS: u64 = 1 << 20;

/// Offset of the file header's tensor count field (where a count over
/// [`MAX_TENSORS`] is reported, reading or writing).
pub const TENSOR_COUNT_OFFSET: u64 = 0x39;

/// Longest safetensors JSON header accepted (safetensors' own limit). Also
/// what makes a file's first 8 bytes a plausible safetensors header length
/// when telling formats apart ([`crate::sniff`]).
pub const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// Limits on what one file's metadata index may declare. The defaults are
/// the constants above; hosts raise them for unusual files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Most components in one tensor path.
    pub max_path_depth: usize,
    /// Most path components over the whole file.
    pub max_path_components: u64,
    /// Most tensors in the file.
    pub max_tensors: u64,
}

impl Default for ParseLimits {
    fn default() -> Self {
        Self {
            max_path_depth: MAX_PATH_DEPTH,
            max_path_components: MAX_PATH_COMPONENTS,
            max_tensors: MAX_TENSORS,
        }
    }
}

/// Smallest possible metadata entry: name length, one name byte, type,
/// dtype length, one dtype byte, ndim, three u64 offsets.
pub const MIN_METADATA_ENTRY_LEN: usize = 2 + 1 + 1 + 1 + 1 + 1 + 24;

/// Default cap on an Argon2id memory cost taken from a file (libsodium's
/// SENSITIVE preset, 1 GiB). Callers may raise it through `KdfLimits`.
pub const DEFAULT_MAX_KDF_MEMLIMIT: u64 = 1024 * 1024 * 1024;

/// Default cap on an Argon2id time cost taken from a file: twice libsodium's
/// SENSITIVE preset (4), so a hostile file cannot buy minutes of CPU.
pub const DEFAULT_MAX_KDF_OPSLIMIT: u64 = 8;

/// Default number of distinct key derivations one file may ask for. A
/// tensorizer file uses one salt for every tensor.
pub const DEFAULT_MAX_KDF_DERIVATIONS: u32 = 4;

/// Default Argon2id work one file may ask for in total, in KiB × passes
/// (memlimit / 1024 × opslimit, summed over distinct derivations): two
/// derivations at the per-derivation caps.
pub const DEFAULT_MAX_KDF_WORK: u64 =
    2 * (DEFAULT_MAX_KDF_MEMLIMIT / 1024) * DEFAULT_MAX_KDF_OPSLIMIT;

/// Smallest Argon2id memory cost libsodium accepts (its MIN preset).
pub const MIN_KDF_MEMLIMIT: u64 = 8192;

/// Largest Argon2id memory cost libsodium accepts on 64-bit targets
/// (`crypto_pwhash_MEMLIMIT_MAX`).
pub const MAX_KDF_MEMLIMIT: u64 = 4_398_046_510_080;

/// Smallest Argon2id time cost libsodium accepts (`crypto_pwhash_OPSLIMIT_MIN`).
pub const MIN_KDF_OPSLIMIT: u64 = 1;

/// Largest Argon2id time cost libsodium accepts (`crypto_pwhash_OPSLIMIT_MAX`).
pub const MAX_KDF_OPSLIMIT: u64 = u32::MAX as u64;

// ---- torch.save zip checkpoints (see `crate::checkpoint`) ----------------

/// The end-of-central-directory record is searched for in this many bytes
/// at the end of a ZIP file: its 22 fixed bytes plus the longest comment.
pub const ZIP_EOCD_SEARCH_WINDOW: u64 = 22 + u16::MAX as u64;

/// Most entries one checkpoint archive may declare.
pub const MAX_ZIP_ENTRIES: u64 = 1 << 20;

/// Longest central directory a reader accepts.
pub const MAX_ZIP_CENTRAL_DIRECTORY_LEN: u64 = 256 * 1024 * 1024;

/// Longest small text record (`version`, `byteorder`, `.format_version`,
/// `.storage_alignment`) that is read.
pub const MAX_CHECKPOINT_RECORD_LEN: u64 = 64;

/// Highest archive `version` record accepted (torch's
/// `kMaxSupportedFileFormatVersion`).
pub const MAX_TORCH_ARCHIVE_VERSION: u64 = 10;

/// Longest `data.pkl` a reader accepts.
pub const MAX_PICKLE_LEN: u64 = 64 * 1024 * 1024;

/// Most opcodes executed while walking one pickle.
pub const MAX_PICKLE_OPCODES: u64 = 1 << 22;

/// Most memo entries one pickle may define.
pub const MAX_PICKLE_MEMO: u64 = 1 << 20;

/// Deepest nesting accepted: open MARKs at once while reading, and
/// container depth while flattening the result.
pub const MAX_PICKLE_DEPTH: usize = 1000;

/// Most values on the pickle stack, and most items in one container.
pub const MAX_PICKLE_CONTAINER_LEN: u64 = 1 << 20;

/// Most bytes of values the pickle machine may hold: a fixed header per
/// value plus what it owns (string bytes, container slots, tensor shapes).
/// Bounds what memoized values passed again and again can cost.
pub const MAX_PICKLE_VALUE_BYTES: u64 = 256 * 1024 * 1024;

/// Longest integer (LONG1/LONG4 payload) accepted, in bytes.
pub const MAX_PICKLE_LONG_BYTES: u64 = 16;

/// Most container nodes and leaves visited while flattening a state dict
/// (shared sub-objects are visited once per reference).
pub const MAX_STATE_DICT_VISITS: u64 = 1 << 22;

/// Most bytes of keys, string leaves and tensor shapes copied into the
/// flattened state dict (a key is copied at each visit of its dict and once
/// per entry below it).
pub const MAX_STATE_DICT_PATH_BYTES: u64 = 64 * 1024 * 1024;

// ---- the scanner (see `crate::scan`) --------------------------------------

/// Most findings of one rule a scan lists; the rest are counted in one
/// `FMT-003` finding.
pub const MAX_FINDINGS_PER_RULE: u64 = 100;

/// Most `*.pkl` entries of one ZIP archive that are scanned; the rest are
/// reported as not scanned.
pub const MAX_SCANNED_PICKLES: u64 = 64;

/// Highest ratio of inflated to deflated bytes the scanner accepts in a
/// compressed ZIP entry: DEFLATE cannot do better than about 1,032 to 1, so
/// an entry declaring more is a lie (a zip bomb's signature) and is not
/// inflated.
pub const MAX_INFLATE_RATIO: u64 = 1032;

/// Most pickle bytes read over a whole scan (every pickle of an archive
/// together); past it, pickles are reported as not scanned.
pub const MAX_SCANNED_PICKLE_BYTES: u64 = 4 * MAX_PICKLE_LEN;

/// Longest file the scanner tries to walk as a protocol 0 or 1 pickle when
/// its first bytes match no format (such a pickle has no header).
pub const MAX_PICKLE_GUESS_LEN: u64 = 16 * 1024 * 1024;

// ---- GGUF headers (see `crate::gguf`) ------------------------------------

/// Most metadata key/value pairs a GGUF header may declare (real models
/// have a few dozen).
pub const MAX_GGUF_KVS: u64 = 1 << 20;

/// Longest GGUF string (a key, a value, an array element): a chat
/// template is kilobytes.
pub const MAX_GGUF_STRING_LEN: u64 = 16 * 1024 * 1024;

/// Most elements of one GGUF array (a tokenizer's vocabulary and merges
/// are a few hundred thousand).
pub const MAX_GGUF_ARRAY_LEN: u64 = 1 << 24;

/// Deepest nesting of GGUF arrays of arrays.
pub const MAX_GGUF_ARRAY_DEPTH: usize = 4;

/// Most dimensions of a GGUF tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_GGUF_DIMS: u64 = 4;

/// Longest GGUF header (metadata and tensor infos) read.
pub const MAX_GGUF_HEADER_LEN: u64 = 256 * 1024 * 1024;

/// Longest sharded checkpoint index (`*.index.json`) the scanner reads: a
/// real one holds a tensor name and a file name per tensor (DeepSeek-V3's
/// 91,000 tensors make about 9 MB).
pub const MAX_SHARD_INDEX_LEN: u64 = 64 * 1024 * 1024;

/// Most pickles read one after another from a bare pickle file (a legacy
/// `torch.save` stream holds five).
pub const MAX_PICKLES_PER_STREAM: u64 = 16;

/// Longest module or name of a global the pickle scanner keeps (longer
/// ones are cut, and never on the allow-list).
pub const MAX_PICKLE_GLOBAL_NAME: usize = 256;
