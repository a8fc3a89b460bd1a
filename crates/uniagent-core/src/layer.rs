//! Layers: the one way a concern is put around a service.
//!
//! A rollout's services are trait objects: `Arc<dyn TokenGenerator>`, `Arc<dyn ChatModel>`,
//! `Arc<dyn Tool>`, `Box<dyn Deployment>`, `Arc<dyn RewardSpec>`. A concern that is not the
//! service's own (seeding requests, recording them to a cassette, emulating a generation
//! device, logging weight versions, preparing a sandbox) is a small wrapper type implementing
//! the same trait, and a *layer* is the value that puts it on: it takes the service and
//! returns the same kind of service with the concern around it. In the spirit of
//! `tower::Layer`, with one difference: a layer here returns the same type it takes (the
//! erased service), so optional concerns are `Option`s and a whole stack is one expression:
//!
//! ```
//! use std::sync::Arc;
//!
//! use async_trait::async_trait;
//! use uniagent_core::layer::{Layer, With};
//! use uniagent_core::{GenerateOutput, GenerateRequest, Result, TokenGenerator};
//!
//! /// The wrapper: answers with a fixed temperature whatever the caller asked.
//! #[derive(Debug)]
//! struct Tempered {
//!     inner: Arc<dyn TokenGenerator>,
//!     temperature: f64,
//! }
//!
//! #[async_trait]
//! impl TokenGenerator for Tempered {
//!     fn name(&self) -> &str {
//!         self.inner.name()
//!     }
//!     async fn generate(&self, mut request: GenerateRequest) -> Result<GenerateOutput> {
//!         request.sampling.temperature = self.temperature;
//!         self.inner.generate(request).await
//!     }
//! }
//!
//! /// The layer that puts it on.
//! struct Temperature(f64);
//!
//! impl Layer<Arc<dyn TokenGenerator>> for Temperature {
//!     fn wrap(&self, inner: Arc<dyn TokenGenerator>) -> Arc<dyn TokenGenerator> {
//!         Arc::new(Tempered { inner, temperature: self.0 })
//!     }
//! }
//!
//! # #[derive(Debug)] struct Engine;
//! # #[async_trait] impl TokenGenerator for Engine {
//! #     fn name(&self) -> &str { "engine" }
//! #     async fn generate(&self, _: GenerateRequest) -> Result<GenerateOutput> {
//! #         Err(uniagent_core::Error::internal("not in this example"))
//! #     }
//! # }
//! let engine: Arc<dyn TokenGenerator> = Arc::new(Engine);
//! let cold: Option<Temperature> = None;
//! // Innermost first: `Temperature(0.6)` around the engine, `cold` (absent) around that.
//! let generator = engine.with(&Temperature(0.6)).with(&cold);
//! assert_eq!(generator.name(), "engine");
//! ```
//!
//! The layers of the workspace: `cassette::Recording` (generators and tools),
//! `sandbox::Setup` (deployments), and in the crates that own those concerns the training
//! pipeline's `Seeding` and `GenerationEmulation`, the CLI's version log and the gateway
//! harness's phase sampling. Retries are not layers: which calls may be resent is the
//! transport's knowledge (an idempotency key, a connection that never answered), so each
//! backend owns its retry policy. Smart pointers (`Arc<T>`, `Box<T>`) forward every trait to
//! their pointee; that is not a concern either.

/// Puts one concern around a service of type `S` (an erased service such as
/// `Arc<dyn TokenGenerator>`), returning the same type.
pub trait Layer<S> {
    /// `inner` with this layer's concern around it.
    fn wrap(&self, inner: S) -> S;
}

/// An absent layer leaves the service as it is, so an optional concern stacks in the same
/// expression as the others.
impl<S, L: Layer<S>> Layer<S> for Option<L> {
    fn wrap(&self, inner: S) -> S {
        match self {
            Some(layer) => layer.wrap(inner),
            None => inner,
        }
    }
}

/// A layer behind a reference is a layer.
impl<S, L: Layer<S> + ?Sized> Layer<S> for &L {
    fn wrap(&self, inner: S) -> S {
        (**self).wrap(inner)
    }
}

/// Stacking: `service.with(&a).with(&b)` is `b` around `a` around `service` (the last one
/// named is the outermost, the first to see a call).
pub trait With: Sized {
    /// `layer` around `self`.
    fn with<L: Layer<Self> + ?Sized>(self, layer: &L) -> Self {
        layer.wrap(self)
    }
}

impl<S> With for S {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends its letter: the order of the letters is the order of wrapping.
    struct Letter(char);

    impl Layer<String> for Letter {
        fn wrap(&self, mut inner: String) -> String {
            inner.push(self.0);
            inner
        }
    }

    #[test]
    fn the_last_layer_named_is_the_outermost_and_absent_ones_are_skipped() {
        let none: Option<Letter> = None;
        let stacked = String::from("s")
            .with(&Letter('a'))
            .with(&none)
            .with(&Some(Letter('b')))
            .with(&&Letter('c'));
        assert_eq!(stacked, "sabc");
    }
}
