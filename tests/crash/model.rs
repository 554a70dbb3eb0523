//! What each writer believes the directory holds: every acknowledged write applied in order.
//! After a crash the directory must equal this model, or this model plus the one operation
//! that was in flight (sent, no reply) when the server died.

use std::collections::{BTreeMap, BTreeSet};

pub const SUFFIX: &str = "dc=example,dc=com";
/// Fixed members of each writer's movable subtree.
pub const SUBTREE_MEMBERS: u32 = 3;

/// One write a writer sends.
#[derive(Clone, Debug)]
pub enum Op {
    Add {
        n: u32,
        parent: char,
    },
    Modify {
        n: u32,
        version: u32,
    },
    Delete {
        n: u32,
    },
    /// Modify DN of a leaf to the other container (newSuperior): its name may change shards.
    Move {
        n: u32,
        to: char,
    },
    /// Modify DN of the subtree's root: every member's DN changes at once.
    RenameSubtree {
        to: char,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    pub parent: char,
    pub version: u32,
}

/// One writer's part of the tree: `ou=w<N>,dc=example,dc=com` with containers `ou=a` and
/// `ou=b` holding leaves, and a subtree named `ou=t` or `ou=u` holding fixed members.
#[derive(Clone, Debug)]
pub struct Model {
    pub writer: usize,
    pub leaves: BTreeMap<u32, Leaf>,
    pub subtree: char,
    pub next_n: u32,
}

/// What a search finds: normalised DN → (description, sn).
pub type Observed = BTreeMap<String, (Option<String>, Option<String>)>;

impl Model {
    pub fn new(writer: usize) -> Self {
        Self { writer, leaves: BTreeMap::new(), subtree: 't', next_n: 0 }
    }

    pub fn root(&self) -> String {
        format!("ou=w{},{SUFFIX}", self.writer)
    }

    pub fn container(&self, which: char) -> String {
        format!("ou={which},{}", self.root())
    }

    pub fn uid(&self, n: u32) -> String {
        format!("w{}-{n}", self.writer)
    }

    pub fn leaf_dn(&self, n: u32, parent: char) -> String {
        format!("uid={},{}", self.uid(n), self.container(parent))
    }

    pub fn subtree_dn(&self, name: char) -> String {
        format!("ou={name},{}", self.root())
    }

    pub fn member_dn(&self, name: char, i: u32) -> String {
        format!("cn=s{i},{}", self.subtree_dn(name))
    }

    /// The writer's group: its members are the subtree's, so every subtree rename rewrites
    /// them (referential integrity).
    pub fn group_dn(&self) -> String {
        format!("cn=g,{}", self.root())
    }

    /// The model after `op` succeeded.
    pub fn apply(&mut self, op: &Op) {
        match *op {
            Op::Add { n, parent } => {
                self.leaves.insert(n, Leaf { parent, version: 0 });
            }
            Op::Modify { n, version } => {
                if let Some(leaf) = self.leaves.get_mut(&n) {
                    leaf.version = version;
                }
            }
            Op::Delete { n } => {
                self.leaves.remove(&n);
            }
            Op::Move { n, to } => {
                if let Some(leaf) = self.leaves.get_mut(&n) {
                    leaf.parent = to;
                }
            }
            Op::RenameSubtree { to } => self.subtree = to,
        }
    }

    /// Every entry this writer's part of the tree should hold, as a search would return it.
    pub fn expected(&self) -> Observed {
        let mut out = Observed::new();
        out.insert(self.root(), (None, None));
        for which in ['a', 'b'] {
            out.insert(self.container(which), (None, None));
        }
        out.insert(self.subtree_dn(self.subtree), (None, None));
        out.insert(self.group_dn(), (None, None));
        for i in 0..SUBTREE_MEMBERS {
            out.insert(self.member_dn(self.subtree, i), (None, None));
        }
        for (&n, leaf) in &self.leaves {
            let v = format!("v{}", leaf.version);
            out.insert(self.leaf_dn(n, leaf.parent), (Some(v.clone()), Some(v)));
        }
        out
    }

    /// Which containers should have children.
    pub fn nonempty_containers(&self) -> BTreeSet<char> {
        self.leaves.values().map(|leaf| leaf.parent).collect()
    }

    /// Picks the next operation from a random number; keeps 5 to 25 leaves around.
    pub fn next_op(&mut self, r: u64) -> Op {
        let count = self.leaves.len();
        let pick = |m: &Self, r: u64| -> Option<(u32, Leaf)> {
            if m.leaves.is_empty() {
                return None;
            }
            let index = (r >> 8) as usize % m.leaves.len();
            m.leaves.iter().nth(index).map(|(&n, leaf)| (n, leaf.clone()))
        };
        let choice = r % 100;
        if count < 5 || (choice < 30 && count < 25) {
            let n = self.next_n;
            self.next_n += 1;
            let parent = if (r >> 16) % 2 == 0 { 'a' } else { 'b' };
            return Op::Add { n, parent };
        }
        let Some((n, leaf)) = pick(self, r) else {
            return Op::RenameSubtree { to: if self.subtree == 't' { 'u' } else { 't' } };
        };
        match choice {
            0..=54 => Op::Modify { n, version: leaf.version + 1 },
            55..=74 => Op::Delete { n },
            75..=92 => Op::Move { n, to: if leaf.parent == 'a' { 'b' } else { 'a' } },
            _ => Op::RenameSubtree { to: if self.subtree == 't' { 'u' } else { 't' } },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moving_a_leaf_changes_only_its_dn() {
        let mut m = Model::new(1);
        m.apply(&Op::Add { n: 0, parent: 'a' });
        m.apply(&Op::Modify { n: 0, version: 3 });
        m.apply(&Op::Move { n: 0, to: 'b' });
        let expected = m.expected();
        assert_eq!(
            expected.get("uid=w1-0,ou=b,ou=w1,dc=example,dc=com"),
            Some(&(Some("v3".into()), Some("v3".into())))
        );
        assert!(!expected.contains_key("uid=w1-0,ou=a,ou=w1,dc=example,dc=com"));
    }
}
