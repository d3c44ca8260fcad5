//! Detects tensor paths that cannot coexist in one state dict, the way
//! tensorizer's path registry does: duplicates, a path that is also the
//! prefix of another, and string keys mixed with indices at one level.
//!
//! The trie is flat: nodes are numbers, and one ordered map takes
//! (parent, component) to the child. Memory is a small constant per
//! distinct component, and nothing recurses, however deep a path is (a
//! nested tree of maps costs ~600 bytes per component and drops
//! recursively).

use alloc::collections::BTreeMap;
use alloc::string::ToString;
use alloc::vec::Vec;

use crate::error::{Error, Result};
use crate::path::{PathComponent, TensorPath};

/// What hangs below a node so far.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Node {
    /// Nothing yet (only the root starts like this).
    Empty,
    /// A tensor ends here: nothing may hang below it.
    Leaf,
    /// Children keyed by strings.
    Keys,
    /// Children keyed by indices.
    Indices,
}

/// Every path registered so far.
pub(crate) struct PathRegistry {
    /// Node 0 is the root.
    nodes: Vec<Node>,
    children: BTreeMap<(u32, PathComponent), u32>,
}

impl Default for PathRegistry {
    fn default() -> Self {
        Self { nodes: alloc::vec![Node::Empty], children: BTreeMap::new() }
    }
}

impl PathRegistry {
    /// Registers `path`, or fails without changing anything if it conflicts
    /// with a path registered before.
    pub(crate) fn insert(&mut self, path: &TensorPath) -> Result<()> {
        let conflict = || Error::ConflictingPaths { path: path.to_string() };
        let components = path.components();
        // Walk the part that exists, checking the kind of each level.
        let mut node = 0u32;
        let mut depth = 0;
        while depth < components.len() {
            let component = &components[depth];
            let kind = if matches!(component, PathComponent::Index(_)) { Node::Indices } else { Node::Keys };
            match self.nodes[node as usize] {
                Node::Leaf => return Err(conflict()),
                Node::Empty => break,
                k if k != kind => return Err(conflict()),
                _ => {}
            }
            match self.children.get(&(node, component.clone())) {
                Some(&child) => node = child,
                None => break,
            }
            depth += 1;
        }
        if depth == components.len() {
            // The whole path exists already: a duplicate or a prefix.
            return Err(conflict());
        }
        let new_nodes = components.len() - depth;
        let first = u32::try_from(self.nodes.len())
            .ok()
            .filter(|n| n.checked_add(new_nodes as u32).is_some())
            .ok_or_else(|| Error::invalid("too many tensor path components"))?;
        // Everything is checked: add the rest of the path.
        for (i, component) in components.into_iter().enumerate().skip(depth) {
            let kind = if matches!(component, PathComponent::Index(_)) { Node::Indices } else { Node::Keys };
            self.nodes[node as usize] = kind;
            let child = first + (i - depth) as u32;
            self.children.insert((node, component), child);
            self.nodes.push(Node::Empty);
            node = child;
        }
        self.nodes[node as usize] = Node::Leaf;
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

    #[test]
    fn failed_inserts_change_nothing() {
        let mut r = PathRegistry::default();
        r.insert(&s(&[Key("m".into()), Key("a".into()), Index(0)])).unwrap();
        let before = (r.nodes.len(), r.children.len());
        assert!(r.insert(&s(&[Key("m".into()), Key("a".into()), Index(0), Key("x".into())])).is_err());
        assert!(r.insert(&s(&[Key("m".into()), Key("a".into()), Key("y".into())])).is_err());
        assert_eq!((r.nodes.len(), r.children.len()), before);
        r.insert(&s(&[Key("m".into()), Key("b".into())])).unwrap();
        r.insert(&s(&[Key("m".into()), Key("a".into()), Index(1)])).unwrap();
    }

    #[test]
    fn deep_paths_neither_recurse_nor_blow_up() {
        let mut r = PathRegistry::default();
        let deep: alloc::vec::Vec<_> = (0..100_000).map(|_| Index(0)).collect();
        r.insert(&s(&deep)).unwrap();
        let mut longer = deep.clone();
        longer.push(Index(0));
        assert!(r.insert(&s(&longer)).is_err());
        assert_eq!(r.nodes.len(), 100_001);
        // Dropping the registry must not recurse either (a nested tree did).
        drop(r);
    }
}
