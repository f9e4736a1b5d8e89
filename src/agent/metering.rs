//! What a chat turn used of its model, kept for usage and cost: requests (one per round),
//! tokens as the provider reported them, and the cost from the model's configured price.

use std::{sync::Arc, time::SystemTime};

use super::{AgentEvent, Usage};
use crate::{
    config::NamedModel,
    policy::CallContext,
    store::{ModelUse, UsageStore},
};

/// Watches one turn's events; the turn's use is kept when [`Metering::finish`] is awaited,
/// or, if the turn is dropped first (its client went away), by a task when this is dropped.
pub struct Metering {
    store: Arc<dyn UsageStore>,
    model: NamedModel,
    ctx: CallContext,
    requests: u64,
    usage: Usage,
    kept: bool,
}

impl Metering {
    pub fn new(store: Arc<dyn UsageStore>, model: &NamedModel, ctx: &CallContext) -> Metering {
        Metering {
            store,
            model: model.clone(),
            ctx: ctx.clone(),
            requests: 0,
            usage: Usage::default(),
            kept: false,
        }
    }

    pub fn observe(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::RoundStart { .. } => self.requests += 1,
            AgentEvent::Final {
                usage: Some(usage), ..
            } => self.usage = *usage,
            _ => {}
        }
    }

    fn take(&mut self) -> Option<ModelUse> {
        if self.kept || self.requests == 0 {
            return None;
        }
        self.kept = true;
        let usage = self.usage;
        Some(ModelUse {
            time: SystemTime::now(),
            tenant: self.ctx.tenant.clone(),
            user: self.ctx.user.clone(),
            session: self.ctx.session.clone(),
            model: self.model.name.clone(),
            requests: self.requests,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cached_tokens: usage.cached_tokens,
            cost_micros: self.model.price.map_or(0, |price| {
                price.cost_micros(
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.cached_tokens,
                )
            }),
        })
    }

    /// Keeps the turn's use now.
    pub async fn finish(mut self) {
        if let Some(used) = self.take() {
            keep(&self.store, &used).await;
        }
    }
}

async fn keep(store: &Arc<dyn UsageStore>, used: &ModelUse) {
    if let Err(err) = store.record_model_use(used).await {
        tracing::warn!(error = %err, model = %used.model, "keeping a turn's model use failed");
    }
}

impl Drop for Metering {
    fn drop(&mut self) {
        if let Some(used) = self.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let store = self.store.clone();
            runtime.spawn(async move { keep(&store, &used).await });
        }
    }
}
