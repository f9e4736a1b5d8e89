//! The round's side of the gate's call relay: upstream progress becomes `tool_progress`
//! events; the chat offers tools no sampling or elicitation, so those requests are refused.
#![expect(
    deprecated,
    reason = "sampling and logging are deprecated by SEP-2577, but servers still send them \
              and the relay must answer them"
)]

use std::time::SystemTime;

use futures::future::BoxFuture;
use rmcp::{
    ErrorData,
    model::{
        CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
        LoggingMessageNotificationParam, ProgressNotificationParam,
    },
};
use tokio::sync::mpsc;

use crate::gateway::CallRelay;

/// Longest progress message passed on, in characters.
const MAX_PROGRESS_MESSAGE_CHARS: usize = 500;

/// A notice from a running call to its round.
pub(crate) enum Signal {
    Progress {
        index: usize,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    Approval {
        index: usize,
        confirmation_id: String,
        tool: String,
        expires_at: SystemTime,
    },
}

/// One call's relay.
pub(crate) struct ProgressRelay {
    index: usize,
    signals: mpsc::Sender<Signal>,
}

impl ProgressRelay {
    pub(crate) fn new(index: usize, signals: mpsc::Sender<Signal>) -> ProgressRelay {
        ProgressRelay { index, signals }
    }
}

impl CallRelay for ProgressRelay {
    fn progress(&self, params: ProgressNotificationParam) -> BoxFuture<'_, ()> {
        let message = params
            .message
            .map(|m| m.chars().take(MAX_PROGRESS_MESSAGE_CHARS).collect());
        // Lossy on purpose: a full queue means the reader is behind, and a newer notice
        // supersedes this one.
        let _ = self.signals.try_send(Signal::Progress {
            index: self.index,
            progress: params.progress,
            total: params.total,
            message,
        });
        Box::pin(async {})
    }

    fn log(&self, _params: LoggingMessageNotificationParam) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn create_message(
        &self,
        _params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorData>> {
        Box::pin(async { Err(not_offered("sampling/createMessage")) })
    }

    fn elicit(
        &self,
        _params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorData>> {
        Box::pin(async { Err(not_offered("elicitation/create")) })
    }
}

fn not_offered(method: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!("{method} is not available: the chat does not offer it to tools"),
        None,
    )
}
