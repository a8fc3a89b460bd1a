//! The garbage collector: owner references and foreground deletion.

use super::*;

impl ControllerHandle {
    /// Garbage collection: dependents of a deleted owner go (background); an owner deleted in
    /// the foreground waits for its dependents, then loses the `foregroundDeletion` finalizer.
    pub(super) fn collect_garbage(&self, view: &View) {
        let all: Vec<(Resource, &Value)> = view
            .by_kind
            .iter()
            .flat_map(|(r, objects)| objects.iter().map(move |o| (*r, o)))
            .collect();
        let uids: HashSet<&str> = all.iter().map(|(_, o)| uid_of(o)).collect();
        for (resource, object) in &all {
            let refs = owners(object);
            if !refs.is_empty()
                && refs.iter().all(|uid| !uids.contains(uid.as_str()))
                && !deleting(object)
            {
                let _ = self.store.delete(
                    *resource,
                    namespace_of(object),
                    name_of(object),
                    Propagation::Background,
                    None,
                    None,
                );
            }
        }
        for (resource, object) in &all {
            if !deleting(object)
                || !finalizers_of(object)
                    .iter()
                    .any(|f| f == FOREGROUND_FINALIZER)
            {
                continue;
            }
            let dependents: Vec<(Resource, &Value)> = view.dependents(uid_of(object)).collect();
            if dependents.is_empty() {
                let _ = self.store.remove_finalizer(
                    *resource,
                    namespace_of(object),
                    name_of(object),
                    FOREGROUND_FINALIZER,
                );
            } else {
                for (dep_resource, dep) in dependents {
                    if !deleting(dep) {
                        let _ = self.store.delete(
                            dep_resource,
                            namespace_of(dep),
                            name_of(dep),
                            Propagation::Foreground,
                            None,
                            None,
                        );
                    }
                }
            }
        }
    }
}
