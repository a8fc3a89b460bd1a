//! The claim controller: adopt a warm sandbox or cold-start one, forward conditions, enforce
//! `shutdownTime`.

use super::*;

/// The claim's status from its sandbox, as the claim controller computes it.
pub(super) fn claim_status(claim: &Value, sandbox: Option<&Value>, never_ready: bool) -> Value {
    let generation = generation(claim);
    let Some(sandbox) = sandbox else {
        return json!({
            "conditions": [condition("Ready", false, "SandboxNotReady", "Sandbox is not ready", generation)],
        });
    };
    let conditions = &sandbox["status"]["conditions"];
    let mut ready = find_condition(conditions, "Ready")
        .cloned()
        .unwrap_or_else(|| {
            condition(
                "Ready",
                false,
                "SandboxNotReady",
                "Sandbox is not ready",
                generation,
            )
        });
    ready["observedGeneration"] = json!(generation);
    if never_ready {
        ready = condition(
            "Ready",
            false,
            "SandboxNotReady",
            "Sandbox is not ready",
            generation,
        );
    }
    let mut list = vec![ready];
    if let Some(finished) = find_condition(conditions, "Finished") {
        list.push(finished.clone());
    }
    let mut sandbox_ref = json!({"name": name_of(sandbox)});
    if let Some(ips) = sandbox["status"]["podIPs"].as_array() {
        sandbox_ref["podIPs"] = Value::Array(ips.clone());
    }
    json!({"conditions": list, "sandbox": sandbox_ref})
}

impl ControllerHandle {
    /// Claims: adopt a ready warm sandbox or cold-start one, forward its conditions, enforce
    /// `shutdownTime`.
    pub(super) fn sync_claims(&self, view: &View) {
        let now = Instant::now();
        let claims = view.of(Resource::SandboxClaims);
        {
            let live: HashSet<&str> = claims.iter().map(uid_of).collect();
            lock(&self.shared.memory)
                .first_seen
                .retain(|uid, _| live.contains(uid.as_str()));
        }
        let mut adopted: HashSet<String> = HashSet::new();
        for claim in claims {
            if deleting(claim) {
                continue;
            }
            let namespace = namespace_of(claim);
            let uid = uid_of(claim);
            let claim_generation = generation(claim);
            let first_seen = *lock(&self.shared.memory)
                .first_seen
                .entry(uid.to_string())
                .or_insert(now);
            let lifecycle = &claim["spec"]["lifecycle"];
            let expired = lifecycle["shutdownTime"]
                .as_str()
                .and_then(parse_time)
                .is_some_and(|t| Timestamp::now() >= t);
            let owned = view.controlled_by(uid, Resource::Sandboxes).next();
            if expired {
                if lifecycle["shutdownPolicy"] == "DeleteForeground" {
                    let _ = self.store.delete(
                        Resource::SandboxClaims,
                        namespace,
                        name_of(claim),
                        Propagation::Foreground,
                        None,
                        None,
                    );
                    continue;
                }
                if let Some(sandbox) = owned {
                    if !deleting(sandbox) {
                        let _ = self.store.delete(
                            Resource::Sandboxes,
                            namespace,
                            name_of(sandbox),
                            Propagation::Background,
                            None,
                            None,
                        );
                    }
                }
                let status = json!({
                    "conditions": [condition("Ready", false, "ClaimExpired", "Claim expired. Sandbox cleanup initiated.", claim_generation)],
                    "sandbox": {},
                });
                self.set_status(
                    Resource::SandboxClaims,
                    claim,
                    with_kept_times(&claim["status"], status),
                );
                continue;
            }
            let sandbox = match owned {
                Some(sandbox) => Some(sandbox),
                None => match self.bind(view, claim, first_seen, now, &mut adopted) {
                    Ok(sandbox) => sandbox,
                    Err((reason, message)) => {
                        let status = json!({
                            "conditions": [condition("Ready", false, reason, &message, claim_generation)],
                            "sandbox": claim["status"]["sandbox"].clone(),
                        });
                        self.set_status(
                            Resource::SandboxClaims,
                            claim,
                            with_kept_times(&claim["status"], without_nulls(status)),
                        );
                        continue;
                    }
                },
            };
            let status = claim_status(claim, sandbox, self.faults.claims_never_ready());
            self.set_status(
                Resource::SandboxClaims,
                claim,
                with_kept_times(&claim["status"], status),
            );
        }
    }

    /// Finds or makes a sandbox for an unbound claim: `Ok(Some)` adopted now, `Ok(None)`
    /// waiting (or a cold start just made), `Err((reason, message))` a Ready=False reason.
    pub(super) fn bind<'v>(
        &self,
        view: &'v View,
        claim: &Value,
        first_seen: Instant,
        now: Instant,
        adopted: &mut HashSet<String>,
    ) -> Result<Option<&'v Value>, (&'static str, String)> {
        let namespace = namespace_of(claim);
        if !claim["status"]["sandbox"]["name"]
            .as_str()
            .unwrap_or("")
            .is_empty()
        {
            return Err(("SandboxMissing", "Sandbox does not exist".into()));
        }
        let pool_name = claim["spec"]["warmPoolRef"]["name"].as_str().unwrap_or("");
        let pool = view
            .find(Resource::SandboxWarmPools, namespace, pool_name)
            .filter(|p| !deleting(p))
            .ok_or_else(|| {
                (
                    "WarmPoolNotFound",
                    format!("SandboxWarmPool {pool_name:?} not found"),
                )
            })?;
        let template_name = pool["spec"]["sandboxTemplateRef"]["name"]
            .as_str()
            .unwrap_or("");
        let template = view
            .find(Resource::SandboxTemplates, namespace, template_name)
            .ok_or_else(|| {
                (
                    "TemplateNotFound",
                    format!("SandboxTemplate {template_name:?} not found"),
                )
            })?;
        let env_given = claim["spec"]["env"]
            .as_array()
            .is_some_and(|e| !e.is_empty());
        if env_given && template["spec"]["envVarsInjectionPolicy"] != "Allowed" {
            return Err((
                "EnvVarsInjectionRejected",
                format!("SandboxTemplate {template_name:?} does not allow environment variable injection"),
            ));
        }
        if now.duration_since(first_seen) < self.config.adopt_delay {
            return Ok(None);
        }
        let pool_uid = uid_of(pool);
        let candidates: Vec<&Value> = view
            .controlled_by(pool_uid, Resource::Sandboxes)
            .filter(|s| !deleting(s) && !adopted.contains(uid_of(s)))
            .collect();
        if !env_given {
            let ready = candidates
                .iter()
                .filter(|s| condition_true(&s["status"]["conditions"], "Ready"))
                .min_by_key(|s| rv_key(s));
            if let Some(sandbox) = ready {
                let claim_ref = owner_ref(Resource::SandboxClaims, claim);
                let adopted_now =
                    self.store
                        .modify(Resource::Sandboxes, namespace, name_of(sandbox), |s| {
                            if controller_uid(s) != Some(pool_uid) {
                                return Err(super::super::store::ApiError::conflict(
                                    Resource::Sandboxes,
                                    name_of(sandbox),
                                    "already adopted",
                                ));
                            }
                            s["metadata"]["ownerReferences"] = json!([claim_ref]);
                            if let Some(extra) =
                                claim["spec"]["additionalPodMetadata"]["labels"].as_object()
                            {
                                for (k, v) in extra {
                                    s["metadata"]["labels"][k] = v.clone();
                                }
                            }
                            Ok(())
                        });
                if adopted_now.is_ok() {
                    adopted.insert(uid_of(sandbox).to_string());
                    return Ok(Some(sandbox));
                }
                return Err((
                    "AdoptionConflict",
                    "the warm sandbox was taken; the next pass retries from a converged view"
                        .into(),
                ));
            }
            let starting = candidates.iter().any(|s| {
                let key = (namespace.to_string(), name_of(s).to_string());
                lock(&self.shared.runtimes).get(&key).is_none_or(|rt| {
                    rt.fault == SandboxFault::None
                        && rt.exit_code.is_none()
                        && rt.spawn_error.is_none()
                })
            });
            if starting && now.duration_since(first_seen) < CANDIDATE_WAIT {
                return Ok(None);
            }
        }
        // Cold start, named after the claim.
        if let Some(name) = self.create_sandbox(
            claim,
            template,
            Resource::SandboxClaims,
            Some(name_of(claim)),
            "cold",
        ) {
            lock(&self.shared.memory)
                .delays
                .insert((namespace.to_string(), name), self.config.cold_delay);
        }
        Ok(None)
    }
}
