//! The rule table: every finding the scanner can report, in one place.
//! Ids are stable: a rule may be added or its wording improved, never
//! renumbered or reused. `spec/22-scanner.md` lists the same table (a test
//! checks it), and the SARIF emitter writes it as the driver's `rules`.

use core::fmt;

/// How serious a finding is (SARIF's `level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Loading the file could run code, lose data or fail: do not load it.
    Error,
    /// An anomaly loaders tolerate but no known writer produces; it can
    /// hide data or signal tampering.
    Warning,
    /// Information about the scan itself (findings left out).
    Note,
}

impl Severity {
    /// The lowercase name, also SARIF's `level`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Note => "note",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule: its stable id, severity, a one-line description (what
/// triggers it) and what to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The rule.
    pub id: RuleId,
    /// Its default severity.
    pub severity: Severity,
    /// What triggers it, in one line.
    pub description: &'static str,
    /// What to do about it.
    pub remediation: &'static str,
    /// Whether a finding of it means loading (or using) the file runs code
    /// the file chose: the fact `tzr view` and the browser inspector lead
    /// with.
    pub executes_code: bool,
}

macro_rules! rules {
    (@exec) => { false };
    (@exec executes_code) => { true };
    ($( $(#[$doc:meta])* $variant:ident = $id:literal, $sev:ident $(+ $exec:ident)?, $desc:literal, $fix:literal; )*) => {
        /// A rule's identity. [`RuleId::as_str`] is its stable id.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[non_exhaustive]
        pub enum RuleId {
            $( $(#[$doc])* $variant, )*
        }

        /// Every rule, in id order.
        pub const RULES: &[Rule] = &[
            $( Rule {
                id: RuleId::$variant,
                severity: Severity::$sev,
                description: $desc,
                remediation: $fix,
                executes_code: rules!(@exec $($exec)?),
            }, )*
        ];

        impl RuleId {
            /// The stable id (`TZR-001`, `ST-004`, ...).
            pub fn as_str(self) -> &'static str {
                match self { $( Self::$variant => $id, )* }
            }
        }
    };
}

rules! {
    /// The bytes match no format the scanner knows.
    UnknownFormat = "FMT-001", Error,
        "The file's bytes match none of the formats scanned (tensorizer, safetensors, torch.save zip, pickle).",
        "Do not load the file as a model; find out what wrote it.";
    /// The file name's extension names another format than its bytes.
    ExtensionMismatch = "FMT-002", Warning,
        "The file name's extension names a different format than the file's bytes (a pickle renamed .safetensors).",
        "Load the file by its real format, or not at all; rename it to match its contents.";
    /// Findings of one rule were left out past the cap.
    FindingsCapped = "FMT-003", Note,
        "More findings of one rule were found than the scanner reports; the rest were counted, not listed.",
        "Treat the file as the listed findings do; the count says how many more there were.";
    /// The tensorizer file header is invalid.
    TzrFileHeader = "TZR-001", Error,
        "The tensorizer file header is invalid: a data version or feature flags this format does not define, or too short.",
        "Rewrite the file with tensorizer or tensorizer-rs; a reader refuses it.";
    /// The tensorizer metadata index is malformed.
    TzrIndex = "TZR-002", Error,
        "The metadata index is malformed: a bad entry, an invalid or conflicting tensor name, or an unknown dtype.",
        "Rewrite the file from its source; a reader refuses it.";
    /// A declared size is above a limit.
    TzrLimit = "TZR-003", Error,
        "A declared size (tensor count, index length, header length, dimensions) is above a reader limit.",
        "Check where the file came from: no real model needs this; readers refuse it.";
    /// A header or data range ends past the end of the file.
    TzrTruncated = "TZR-004", Error,
        "A header, index or tensor data range ends past the end of the file (a truncated download or a lying length).",
        "Download or copy the file again and compare its size with the source.";
    /// A tensor header is malformed or disagrees with the index.
    TzrTensorHeader = "TZR-005", Error,
        "A tensor header is malformed or disagrees with its metadata index entry (name, dtype, shape, offsets).",
        "Rewrite the file; a reader refuses the tensor.";
    /// Encryption metadata is inconsistent.
    TzrEncryption = "TZR-006", Error,
        "Encryption metadata is inconsistent: an unencrypted tensor in an encrypted file, a MAC count that does not fit the data, a chunk too large.",
        "Re-encrypt the file with tensorizer or tensorizer-rs.";
    /// A stored hash does not match the data (with verify).
    TzrHashMismatch = "TZR-007", Error,
        "A tensor's stored CRC32 or SHA-256 does not match its data (found with --verify).",
        "The data was corrupted or altered: fetch the file again from a trusted source.";
    /// Decryption (authentication) failed (with verify).
    TzrAuthFailed = "TZR-008", Error,
        "A tensor failed authentication: wrong key or passphrase, or altered ciphertext (found with --verify).",
        "Check the key; with the right key, the file was altered: fetch it again.";
    /// The safetensors header length is above the limit or beyond the file.
    StHeaderLimit = "ST-001", Error,
        "The safetensors header length is above safetensors' 100,000,000-byte limit or beyond the end of the file.",
        "Regenerate the file with the safetensors library; loaders refuse it.";
    /// The safetensors header is not a JSON object.
    StHeaderJson = "ST-002", Error,
        "The safetensors header is not valid UTF-8 JSON, or not a JSON object.",
        "Regenerate the file with the safetensors library; loaders refuse it.";
    /// A tensor entry lacks a dtype, shape or data offsets.
    StEntry = "ST-003", Error,
        "A tensor entry lacks a dtype, shape or data_offsets, or holds values of the wrong type.",
        "Regenerate the file with the safetensors library; loaders refuse the tensor.";
    /// A dtype safetensors does not define.
    StUnknownDtype = "ST-004", Error,
        "A tensor's dtype is not one safetensors defines.",
        "Convert the tensor to a dtype safetensors defines (see spec 06).";
    /// The data range length differs from shape × dtype size.
    StSizeMismatch = "ST-005", Error,
        "A tensor's data range is not the size its shape and dtype give.",
        "Regenerate the file; the tensor would load with wrong or missing elements.";
    /// A data range ends past the end of the file.
    StPastEnd = "ST-006", Error,
        "A tensor's data range ends past the end of the file.",
        "Download the file again and compare its size with the source.";
    /// Two tensors' data overlap.
    StOverlap = "ST-007", Error,
        "Two tensors' data ranges overlap (one tensor's bytes are read as another's).",
        "Regenerate the file; writers never share bytes between tensors.";
    /// A data range starts after it ends.
    StReversed = "ST-008", Error,
        "A tensor's data_offsets are reversed (begin after end).",
        "Regenerate the file; loaders refuse it.";
    /// Bytes in the data area no tensor covers.
    StGap = "ST-009", Warning,
        "Bytes in the data area between tensors belong to no tensor (room to hide a payload).",
        "Regenerate the file; the safetensors library refuses gaps.";
    /// Bytes after the last tensor's data.
    StTrailing = "ST-010", Warning,
        "Bytes follow the last tensor's data (appended data no loader reads).",
        "Strip the trailing bytes or regenerate the file.";
    /// Misaligned header or tensor data.
    StMisaligned = "ST-011", Warning,
        "The header length is not a multiple of 8, or a tensor's data does not start at a multiple of its element size.",
        "Regenerate the file with the safetensors library, which pads the header to 8 bytes.";
    /// `__metadata__` is not a map of strings to strings.
    StMetadata = "ST-012", Warning,
        "__metadata__ is not a JSON object of string values.",
        "Rewrite __metadata__ as string keys and string values.";
    /// A tensor name appears twice in the header.
    StDuplicate = "ST-013", Error,
        "A tensor name appears more than once in the header (which one a loader keeps depends on its JSON parser).",
        "Regenerate the file; each name must appear once.";
    /// The ZIP structure cannot be read.
    ZipStructure = "ZIP-001", Error,
        "The ZIP structure is broken: no end-of-central-directory record, a central directory that cannot be read, or a declared size above a limit.",
        "Save the checkpoint again with torch.save.";
    /// Two entries with one name.
    ZipDuplicate = "ZIP-002", Error,
        "Two archive entries have the same name (readers disagree about which one counts).",
        "Save the checkpoint again; torch.save writes each name once.";
    /// Two entries' bytes overlap.
    ZipOverlap = "ZIP-003", Error,
        "Two archive entries' local headers or data overlap.",
        "Save the checkpoint again; overlapping entries are a known way to show different readers different files.";
    /// An entry's data ends past the end of the file or in the directory.
    ZipPastEnd = "ZIP-004", Error,
        "An entry's data (or the central directory) ends past the end of the file or runs into the central directory.",
        "Download the file again; it is truncated or its sizes lie.";
    /// Local and central headers disagree.
    ZipHeaderMismatch = "ZIP-005", Error,
        "An entry's local header disagrees with its central-directory record (name, sizes, method, flags), or a stored entry's two sizes differ.",
        "Save the checkpoint again; disagreeing headers show different readers different data.";
    /// A compressed entry.
    ZipCompressed = "ZIP-006", Warning,
        "An entry is compressed; torch.save stores entries uncompressed (a deflated pickle is inflated and scanned, within the zip-bomb limits).",
        "Nothing to unpack: a deflated pickle was inflated and scanned (its findings are listed; another method is PKL-005); save the checkpoint again with torch.save to store it as torch does.";
    /// An encrypted entry.
    ZipEncrypted = "ZIP-007", Error,
        "An entry is encrypted (ZIP general-purpose flag bit 0); it cannot be scanned.",
        "Do not load it; ask for an unencrypted checkpoint.";
    /// Bytes outside every entry and the directory.
    ZipOutside = "ZIP-008", Warning,
        "Bytes lie outside every entry: before the first entry or after the end record (prepended or appended data).",
        "Save the checkpoint again; a polyglot file can be read as two formats.";
    /// No pickle in the archive.
    ZipNoPickle = "ZIP-009", Warning,
        "The ZIP archive holds no .pkl entry: it is not a torch.save checkpoint.",
        "Load it with the tool that wrote it, after checking what it is.";
    /// More than one end record.
    ZipTwoEnds = "ZIP-010", Error,
        "The archive holds more than one end-of-central-directory record (readers searching from the start and from the end see different archives).",
        "Save the checkpoint again; torch.save writes one end record.";
    /// A shard index that cannot be read as one.
    IdxMalformed = "IDX-001", Error,
        "A sharded checkpoint's index (model.safetensors.index.json, pytorch_model.bin.index.json) is not JSON, has no weight_map object, or maps a tensor to something that is not a file name.",
        "Write the index again from the shards (save_pretrained writes it); loaders refuse it.";
    /// A shard index above the size limit.
    IdxLimit = "IDX-002", Error,
        "A shard index is larger than MAX_SHARD_INDEX_LEN (64 MiB); it and its shards were not checked against each other.",
        "Check where the index came from: a real one lists a few bytes per tensor.";
    /// A shard the index names is missing.
    IdxMissingShard = "IDX-003", Error,
        "A shard the index names is not in the index's folder (a loader fails, or finds another file).",
        "Download the missing shard again, or the whole model.";
    /// A model file beside the index that it does not name.
    IdxUnnamedShard = "IDX-004", Warning,
        "A model file of the shards' format in the index's folder is not named by the index (a loader never reads it: a stale or planted file). It is scanned on its own.",
        "Delete the file if it is not part of the model, or write the index again.";
    /// A tensor mapped to a shard that does not hold it.
    IdxTensorNotInShard = "IDX-005", Error,
        "The index maps a tensor to a shard that does not hold it (a loader fails, or leaves the tensor unloaded).",
        "Write the index again from the shards, or download the model again.";
    /// A shard path leaving the index's folder.
    IdxPathEscape = "IDX-006", Error,
        "A shard path leaves the index's folder (a .. component, an absolute path, a drive letter): a loader reads a file outside the model.",
        "Do not load the model; an index names files beside it only.";
    /// The GGUF header cannot be read.
    GgufHeader = "GGUF-001", Error,
        "The GGUF header cannot be read: truncated, a version other than 2 or 3, a value type GGUF does not define, a count or length above a limit, a bad general.alignment.",
        "Convert the model again with llama.cpp's tools; loaders refuse it.";
    /// A tensor's type or shape cannot be sized.
    GgufTensorType = "GGUF-002", Error,
        "A GGUF tensor has a ggml type ggml does not define, a first dimension that is not a whole number of its type's blocks, or a size that overflows.",
        "Convert the model again; llama.cpp refuses the tensor.";
    /// A tensor's data ends past the end of the file.
    GgufPastEnd = "GGUF-003", Error,
        "A GGUF tensor's data ends past the end of the file.",
        "Download the file again and compare its size with the source.";
    /// Two tensors' data overlap.
    GgufOverlap = "GGUF-004", Error,
        "Two GGUF tensors' data ranges overlap (one tensor's bytes are read as another's).",
        "Convert the model again; writers never share bytes between tensors.";
    /// A tensor's data offset is not aligned.
    GgufMisaligned = "GGUF-005", Error,
        "A GGUF tensor's data offset is not a multiple of general.alignment (32 by default); llama.cpp refuses the file.",
        "Convert the model again with llama.cpp's tools.";
    /// A chat template with code-execution patterns.
    GgufChatTemplate = "GGUF-006", Error + executes_code,
        "A Jinja chat template's code reaches for Python internals or the OS (__class__, __globals__, __subclasses__, import, os., popen, ...): rendering it can run code where the template engine is not sandboxed.",
        "Do not serve the model with its template; replace tokenizer.chat_template with a known-good template.";
    /// A global that is not on the allow-list.
    PklGlobal = "PKL-001", Error + executes_code,
        "The pickle imports a global that is not on the state-dict allow-list (loading it imports that module).",
        "Load with torch.load(weights_only=True) or convert to safetensors in a sandbox; never unpickle it as is.";
    /// A call of a callable not on the allow-list.
    PklCall = "PKL-002", Error + executes_code,
        "The pickle calls (REDUCE, NEWOBJ, INST, OBJ) or rebuilds (BUILD) an object with a callable not on the allow-list: loading it runs that code.",
        "Do not load it; if the source is trusted, convert it in a sandbox and scan the result.";
    /// The pickle cannot be walked.
    PklMalformed = "PKL-003", Error,
        "The pickle is malformed (an unknown opcode, a stack underflow, a truncated stream); what follows was not scanned.",
        "Do not load it: a loader stops there too, after running whatever came before.";
    /// Bytes after the pickle.
    PklTrailing = "PKL-004", Warning,
        "Bytes follow the pickle's STOP that no pickle reads.",
        "Strip the trailing bytes or save the object again.";
    /// A pickle was not scanned in full.
    PklNotScanned = "PKL-005", Error,
        "A pickle was not scanned in full: above the scan limits, compressed by a method other than deflate, encrypted, or in a tar archive.",
        "Scan it unpacked, or save the checkpoint again uncompressed.";
    /// STACK_GLOBAL on operands that are not literal strings.
    PklComputedGlobal = "PKL-006", Error + executes_code,
        "The pickle imports a global whose module or name is computed at load time (STACK_GLOBAL on values earlier opcodes made, not literal strings).",
        "Do not load it: no writer computes a global's name; it hides what the pickle imports from scanners.";
    /// An object weights_only refuses whose rebuilding runs no code outside its library.
    PklInert = "PKL-007", Warning,
        "The pickle rebuilds an object torch.load(weights_only=True) refuses but whose rebuilding runs only its own library's code: a whole torch.nn module, a numpy array, scalar or dtype, an argparse.Namespace.",
        "Save the state_dict instead, or load with weights_only=True after torch.serialization.add_safe_globals for that class.";
    /// A suppression entry that matched no finding.
    UnusedSuppression = "SUP-001", Note,
        "An entry of the suppression file (.tzrscan.toml, --ignore) matched no finding in the files scanned.",
        "Delete the entry if what it accepted is gone, or fix its rule or path glob.";
}

impl RuleId {
    /// The rule's row in [`RULES`].
    pub fn rule(self) -> &'static Rule {
        // Every variant has a row: the macro writes both from one list.
        RULES.iter().find(|r| r.id == self).unwrap_or(&RULES[0])
    }

    /// The rule's default severity.
    pub fn severity(self) -> Severity {
        self.rule().severity
    }

    /// Whether a finding of this rule means loading the file runs code
    /// (see [`Rule::executes_code`]).
    pub fn executes_code(self) -> bool {
        self.rule().executes_code
    }

    /// What to do about a finding of this rule.
    pub fn remediation(self) -> &'static str {
        self.rule().remediation
    }

    /// Looks a rule up by its stable id.
    pub fn from_id(id: &str) -> Option<Self> {
        RULES.iter().find(|r| r.id.as_str() == id).map(|r| r.id)
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_sorted_within_a_family_and_round_trip() {
        for (i, r) in RULES.iter().enumerate() {
            assert_eq!(RuleId::from_id(r.id.as_str()), Some(r.id));
            for other in &RULES[i + 1..] {
                assert_ne!(r.id.as_str(), other.id.as_str());
            }
            assert!(!r.description.is_empty() && !r.remediation.is_empty());
        }
        assert_eq!(RuleId::PklCall.severity(), Severity::Error);
    }

    /// spec/22-scanner.md §22.3 lists exactly the rules in code, with the
    /// same severity, description and remediation, in the same order.
    #[test]
    fn the_spec_table_lists_exactly_these_rules() {
        extern crate std;
        use alloc::string::String;
        use alloc::vec::Vec;
        let path = std::format!("{}/../spec/22-scanner.md", env!("CARGO_MANIFEST_DIR"));
        let spec = std::fs::read_to_string(&path).unwrap();
        let rows: Vec<Vec<String>> = spec
            .lines()
            .filter(|l| {
                l.starts_with("| `") && l.split('|').nth(1).is_some_and(|c| c.contains('-'))
            })
            .map(|l| l.trim_matches('|').split(" | ").map(|c| String::from(c.trim())).collect())
            .filter(|cells: &Vec<String>| cells.len() == 5)
            .collect();
        let want: Vec<Vec<String>> = RULES
            .iter()
            .map(|r| {
                [
                    std::format!("`{}`", r.id),
                    r.severity.as_str().into(),
                    (if r.executes_code { "yes" } else { "no" }).into(),
                    r.description.into(),
                    r.remediation.into(),
                ]
                .into()
            })
            .collect();
        assert_eq!(rows, want, "update the table in {path}");
    }
}
