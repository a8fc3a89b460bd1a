//! Grouping of rows by their `uid` (verl's `index` argument): the samples of one prompt.

use std::collections::HashMap;

/// Rows grouped by equal `uid` strings, groups in order of first appearance.
///
/// ```
/// use uniagent_train::rl::Groups;
/// let g = Groups::from_uids(&["a", "b", "a"]);
/// assert_eq!(g.members(), &[vec![0, 2], vec![1]]);
/// assert_eq!(g.group_size_of_row(2), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    members: Vec<Vec<usize>>,
    group_of_row: Vec<usize>,
}

impl Groups {
    /// Groups `uids` (one per row) by equality.
    pub fn from_uids<S: AsRef<str>>(uids: &[S]) -> Self {
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut group_of_row = Vec::with_capacity(uids.len());
        for (row, uid) in uids.iter().enumerate() {
            let next = members.len();
            let group = *index.entry(uid.as_ref()).or_insert(next);
            if group == next {
                members.push(Vec::new());
            }
            if let Some(list) = members.get_mut(group) {
                list.push(row);
            }
            group_of_row.push(group);
        }
        Self {
            members,
            group_of_row,
        }
    }

    /// The rows of each group.
    pub fn members(&self) -> &[Vec<usize>] {
        &self.members
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.group_of_row.len()
    }

    /// The group of each row.
    pub fn group_of_row(&self) -> &[usize] {
        &self.group_of_row
    }

    /// The size of the group that `row` belongs to (0 for a row out of range).
    pub fn group_size_of_row(&self, row: usize) -> usize {
        self.group_of_row
            .get(row)
            .and_then(|g| self.members.get(*g))
            .map_or(0, Vec::len)
    }
}
