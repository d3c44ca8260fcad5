#![no_main]
//! Differential: the writer's conflict check (the flat path registry) must
//! agree with the definition, checked naively against every earlier path.
use libfuzzer_sys::fuzz_target;
use tensorizer_core::{
    Dtype, ElementType, Error, PathComponent, TensorPath, TensorSpec, Writer, WriterOptions,
};

/// Bytes → paths: 0xFF ends a path; other bytes pick a small key or index,
/// so collisions, prefixes and mixed levels are common.
fn paths(data: &[u8]) -> Vec<Vec<PathComponent>> {
    data.split(|&b| b == 0xff)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.iter()
                .map(|&b| {
                    if b & 1 == 0 {
                        PathComponent::Index(u64::from(b >> 5))
                    } else {
                        PathComponent::Key(((b >> 5) + b'a').to_string())
                    }
                })
                .collect()
        })
        .collect()
}

const MAX_PATHS: usize = 256;

fn conflicts(a: &[PathComponent], b: &[PathComponent]) -> bool {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if common == a.len() || common == b.len() {
        return true; // equal, or one is a prefix of the other
    }
    matches!(a[common], PathComponent::Index(_)) != matches!(b[common], PathComponent::Index(_))
}

fuzz_target!(|data: &[u8]| {
    let mut writer = Writer::new(&WriterOptions::default()).unwrap();
    let mut accepted: Vec<Vec<PathComponent>> = Vec::new();
    let u8t = Dtype::from_element(ElementType::U8);
    // The naive check is quadratic: a few hundred paths keep runs fast.
    for components in paths(data).into_iter().take(MAX_PATHS) {
        let Ok(path) = TensorPath::from_components(components.clone()) else { continue };
        // A lone key becomes a plain name: compare on the normalised form.
        let normal = match &path {
            TensorPath::Plain(s) => vec![PathComponent::Key(s.clone())],
            TensorPath::Structured(c) => c.clone(),
        };
        let expected = accepted.iter().any(|p| conflicts(p, &normal));
        match writer.add(&TensorSpec::state_dict(path, u8t.clone(), vec![]), None) {
            Ok(_) => {
                assert!(!expected, "accepted a conflicting path {normal:?}");
                accepted.push(normal);
            }
            Err(Error::ConflictingPaths { .. }) => assert!(expected, "refused {normal:?}"),
            Err(_) => return,
        }
    }
});
