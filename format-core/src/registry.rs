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
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::borrow::Borrow;
use core::cmp::Ordering;

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

/// A path component, borrowed: what lookups use, so walking a path
/// allocates nothing. Ordered exactly as [`PathComponent`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step<'a> {
    Key(&'a str),
    Index(u64),
}

impl<'a> From<&'a PathComponent> for Step<'a> {
    fn from(c: &'a PathComponent) -> Self {
        match c {
            PathComponent::Key(k) => Step::Key(k),
            PathComponent::Index(i) => Step::Index(*i),
        }
    }
}

impl Step<'_> {
    fn kind(self) -> Node {
        match self {
            Step::Key(_) => Node::Keys,
            Step::Index(_) => Node::Indices,
        }
    }

    fn owned(self) -> PathComponent {
        match self {
            Step::Key(k) => PathComponent::Key(String::from(k)),
            Step::Index(i) => PathComponent::Index(i),
        }
    }
}

/// The steps of `path`, borrowed.
fn steps(path: &TensorPath) -> Vec<Step<'_>> {
    match path {
        TensorPath::Plain(s) => alloc::vec![Step::Key(s)],
        TensorPath::Structured(c) => c.iter().map(Step::from).collect(),
    }
}

/// An edge of the trie: (parent node, component) -> child. Looked up through
/// [`EdgeKey`] with a borrowed component.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    parent: u32,
    component: PathComponent,
}

/// A view of an edge's key, owned or borrowed, so the map can be searched
/// without building an owned key.
trait EdgeKey {
    fn key(&self) -> (u32, Step<'_>);
}

impl EdgeKey for Edge {
    fn key(&self) -> (u32, Step<'_>) {
        (self.parent, Step::from(&self.component))
    }
}

impl EdgeKey for (u32, Step<'_>) {
    fn key(&self) -> (u32, Step<'_>) {
        *self
    }
}

impl<'a> Borrow<dyn EdgeKey + 'a> for Edge {
    fn borrow(&self) -> &(dyn EdgeKey + 'a) {
        self
    }
}

impl PartialEq for dyn EdgeKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for dyn EdgeKey + '_ {}

impl PartialOrd for dyn EdgeKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn EdgeKey + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// Every path registered so far.
pub(crate) struct PathRegistry {
    /// Node 0 is the root.
    nodes: Vec<Node>,
    children: BTreeMap<Edge, u32>,
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
        let steps = steps(path);
        // Walk the part that exists, checking the kind of each level.
        let mut node = 0u32;
        let mut depth = 0;
        while depth < steps.len() {
            let step = steps[depth];
            match self.nodes[node as usize] {
                Node::Leaf => return Err(conflict()),
                Node::Empty => break,
                k if k != step.kind() => return Err(conflict()),
                _ => {}
            }
            match self.children.get(&(node, step) as &dyn EdgeKey) {
                Some(&child) => node = child,
                None => break,
            }
            depth += 1;
        }
        if depth == steps.len() {
            // The whole path exists already: a duplicate or a prefix.
            return Err(conflict());
        }
        let new_nodes = steps.len() - depth;
        let first = u32::try_from(self.nodes.len())
            .ok()
            .filter(|n| n.checked_add(new_nodes as u32).is_some())
            .ok_or_else(|| Error::invalid("too many tensor path components"))?;
        // Everything is checked: add the rest of the path.
        for (i, step) in steps.iter().enumerate().skip(depth) {
            self.nodes[node as usize] = step.kind();
            let child = first + (i - depth) as u32;
            self.children.insert(Edge { parent: node, component: step.owned() }, child);
            self.nodes.push(Node::Empty);
            node = child;
        }
        self.nodes[node as usize] = Node::Leaf;
        Ok(())
    }
}

/// Checks a whole index's paths at once. Plain names can only conflict by
/// being equal, so a file of plain names (nearly every file) is checked by
/// sorting borrowed names and comparing neighbours: no per-path allocation
/// and no tree. Any structured path sends every path through the registry,
/// in order.
pub(crate) fn check_all<'a, I>(paths: I) -> Result<()>
where
    I: Iterator<Item = &'a TensorPath> + Clone,
{
    let plain: Option<Vec<&str>> = paths
        .clone()
        .map(|p| match p {
            TensorPath::Plain(s) => Some(s.as_str()),
            TensorPath::Structured(_) => None,
        })
        .collect();
    match plain {
        Some(mut names) => {
            names.sort_unstable();
            match names.windows(2).find(|w| w[0] == w[1]) {
                Some(w) => Err(Error::ConflictingPaths { path: w[0].to_string() }),
                None => Ok(()),
            }
        }
        None => {
            let mut registry = PathRegistry::default();
            paths.into_iter().try_for_each(|p| registry.insert(p))
        }
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
    fn batch_checks_agree_with_the_registry() {
        let plain = |n: &str| TensorPath::Plain(n.into());
        let ok = [plain("b"), plain("a"), plain("a.b")];
        assert!(check_all(ok.iter()).is_ok());
        let dup = [plain("x"), plain("y"), plain("x")];
        assert!(
            matches!(check_all(dup.iter()), Err(Error::ConflictingPaths { path }) if path == "x")
        );
        let mixed = [plain("a"), s(&[Key("a".into()), Index(0)])];
        assert!(matches!(check_all(mixed.iter()), Err(Error::ConflictingPaths { .. })));
        let nested = [s(&[Key("a".into()), Index(0)]), s(&[Key("a".into()), Index(1)]), plain("b")];
        assert!(check_all(nested.iter()).is_ok());
        assert!(check_all([].iter()).is_ok());
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
        assert!(
            r.insert(&s(&[Key("m".into()), Key("a".into()), Index(0), Key("x".into())])).is_err()
        );
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
