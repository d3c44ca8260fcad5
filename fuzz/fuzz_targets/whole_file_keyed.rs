#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_core::crypto::{KdfLimits, Key, Passphrase};
use tensorizer_core::{File, KeySource};

// Decryption paths: a raw key and a passphrase (with tight KDF limits so
// one input cannot cost seconds).
fuzz_target!(|data: &[u8]| {
    let Ok(file) = File::parse(data) else { return };
    let limits = KdfLimits { max_memlimit: 64 * 1024, max_opslimit: 2, ..KdfLimits::default() };
    let keys = [
        KeySource::Key(Key::from_bytes(core::array::from_fn(|i| i as u8))),
        KeySource::Passphrase(Passphrase::new(b"test-passphrase-not-secret".to_vec()), limits),
    ];
    for key in &keys {
        for i in 0..file.metadata.entries.len() {
            if let Ok((record, _)) = file.tensor(i) {
                let _ = record.cipher();
            }
            let _ = file.load(i, Some(key));
        }
    }
});
