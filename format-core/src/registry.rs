//! Detects tensor paths that cannot coexist in one state dict, the way
//! tensorizer's path registry does: duplicates, a path that is also the
//! prefix of another, and string keys mixed with indices at one level.

use alloc::collections::BTreeMap;
use alloc::string::ToString;

use crate::error::{Error, Result};
use crate::path::{PathComponent, TensorPath};

#[derive(Default)]
struct Branch {
    children: BTreeMap<PathComponent, Node>,
}

enum Node {
    Leaf,
    Branch(Branch),
}

/// A trie of every path registered so far.
#[derive(Default)]
pub(crate) struct PathRegistry {
    root: Branch,
}

impl PathRegistry {
    pub(crate) fn insert(&mut self, path: &TensorPath) -> Result<()> {
        let conflict = || Error::ConflictingPaths { path: path.to_string() };
        let components = path.components();
        let mut branch = &mut self.root;
        for (depth, component) in components.iter().enumerate() {
            let is_index = matches!(component, PathComponent::Index(_));
            if let Some((first, _)) = branch.children.iter().next()
                && matches!(first, PathComponent::Index(_)) != is_index
            {
                return Err(conflict());
            }
            let last = depth + 1 == components.len();
            if last {
                if branch.children.contains_key(component) {
                    return Err(conflict());
                }
                branch.children.insert(component.clone(), Node::Leaf);
                return Ok(());
            }
            let node = branch.children.entry(component.clone()).or_insert_with(|| Node::Branch(Branch::default()));
            branch = match node {
                Node::Leaf => return Err(conflict()),
                Node::Branch(b) => b,
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathComponent::{Index, Key};

    fn s(parts: &[PathComponent]) -> TensorPath {
        TensorPath::from_components(parts.to_vec()).unwrap()
    }

    #[test]
    fn conflicts() {
        let mut r = PathRegistry::default();
        r.insert(&"a".into()).unwrap();
        r.insert(&"a.b".into()).unwrap();
        r.insert(&s(&[Key("m".into()), Index(0)])).unwrap();
        r.insert(&s(&[Key("m".into()), Index(1)])).unwrap();
        assert!(r.insert(&"a".into()).is_err());
        assert!(r.insert(&s(&[Key("a".into()), Index(0)])).is_err());
        assert!(r.insert(&s(&[Key("m".into())])).is_err());
        assert!(r.insert(&s(&[Key("m".into()), Key("x".into())])).is_err());
        assert!(r.insert(&s(&[Index(0)])).is_err());
    }
}
