//! A snapshot of the store indexed for one reconcile pass.

use super::*;

/// A snapshot split by kind, indexed by (namespace, name), by controller and by owner, so that
/// a pass stays linear in the number of objects (a thousand claims are a few thousand objects).
pub(super) struct View {
    pub(super) by_kind: HashMap<Resource, Vec<Value>>,
    pub(super) by_name: HashMap<(Resource, String, String), usize>,
    /// Objects by the uid of their controller owner reference.
    pub(super) by_controller: HashMap<String, Vec<(Resource, usize)>>,
    /// Objects by the uid of each of their owner references.
    pub(super) by_owner: HashMap<String, Vec<(Resource, usize)>>,
}

impl View {
    pub(super) fn new(objects: Vec<(Resource, Value)>) -> Self {
        let mut view = View {
            by_kind: HashMap::new(),
            by_name: HashMap::new(),
            by_controller: HashMap::new(),
            by_owner: HashMap::new(),
        };
        for (resource, object) in objects {
            let list = view.by_kind.entry(resource).or_default();
            let at = list.len();
            view.by_name.insert(
                (
                    resource,
                    namespace_of(&object).to_owned(),
                    name_of(&object).to_owned(),
                ),
                at,
            );
            if let Some(uid) = controller_uid(&object) {
                view.by_controller
                    .entry(uid.to_owned())
                    .or_default()
                    .push((resource, at));
            }
            for uid in owners(&object) {
                view.by_owner.entry(uid).or_default().push((resource, at));
            }
            list.push(object);
        }
        view
    }

    pub(super) fn of(&self, resource: Resource) -> &[Value] {
        self.by_kind
            .get(&resource)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    pub(super) fn at(&self, (resource, at): (Resource, usize)) -> (Resource, &Value) {
        (resource, &self.of(resource)[at])
    }

    pub(super) fn find(&self, resource: Resource, namespace: &str, name: &str) -> Option<&Value> {
        let key = (resource, namespace.to_owned(), name.to_owned());
        self.by_name.get(&key).map(|&at| &self.of(resource)[at])
    }

    /// The objects of kind `resource` whose controller is `uid`.
    pub(super) fn controlled_by<'v>(
        &'v self,
        uid: &str,
        resource: Resource,
    ) -> impl Iterator<Item = &'v Value> + 'v {
        self.by_controller
            .get(uid)
            .into_iter()
            .flatten()
            .filter(move |(r, _)| *r == resource)
            .map(|&found| self.at(found).1)
    }

    /// Every object with an owner reference to `uid`.
    pub(super) fn dependents<'v>(
        &'v self,
        uid: &str,
    ) -> impl Iterator<Item = (Resource, &'v Value)> + 'v {
        self.by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .map(|&found| self.at(found))
    }
}
