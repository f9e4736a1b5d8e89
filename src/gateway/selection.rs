//! A conversation's choice of servers: the ids a caller names to narrow the tools a turn
//! offers the model, checked against what the caller may use.

use super::Gateway;
use crate::{
    config::{ServerId, USER_SERVER_PREFIX},
    policy::CallContext,
};

/// Most servers one selection names: more than any catalog has, fewer than an abuse needs.
pub const MAX_SELECTED_SERVERS: usize = 256;

/// Characters of a refused id shown back.
const MAX_SHOWN_ID_CHARS: usize = 40;

/// Why a selection was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// The id names no server the caller may use: unknown and hidden read alike.
    #[error("no server `{0}` is available to you")]
    UnknownServer(String),
    #[error("a selection names at most {MAX_SELECTED_SERVERS} servers")]
    TooMany,
}

impl SelectionError {
    /// The stable code APIs answer with.
    pub fn code(&self) -> &'static str {
        match self {
            SelectionError::UnknownServer(_) => "unknown_server",
            SelectionError::TooMany => "bad_request",
        }
    }
}

impl Gateway {
    /// `ids` as server ids `ctx` may use (configured servers `[access]` lets it see, the
    /// pages it may call, and its own servers), in the given order without repeats; the first
    /// id that is none of these refuses the whole selection, so a typo never silently drops a
    /// server.
    pub async fn selectable_servers(
        &self,
        ctx: &CallContext,
        ids: &[String],
    ) -> Result<Vec<ServerId>, SelectionError> {
        if ids.len() > MAX_SELECTED_SERVERS {
            return Err(SelectionError::TooMany);
        }
        // The caller's own servers, read once if the selection names any.
        let own: Vec<String> = match ids.iter().any(|id| id.starts_with(USER_SERVER_PREFIX)) {
            true => self
                .my_servers(ctx)
                .await
                .map(|servers| servers.into_iter().map(|s| s.server).collect())
                .unwrap_or_default(),
            false => Vec::new(),
        };
        let mut selected: Vec<ServerId> = Vec::with_capacity(ids.len());
        for raw in ids {
            let usable = ServerId::new(raw).filter(|id| {
                if crate::webmcp::is_page(id) {
                    self.inner.pages.visible(ctx, id)
                } else if super::is_user_server(id) && self.user_servers_enabled() {
                    own.iter().any(|mine| mine == id.as_str())
                } else {
                    self.sees_server(ctx, id)
                }
            });
            let Some(id) = usable else {
                // Shown back cut short, anything but printable ASCII as `?`.
                let shown: String = raw
                    .chars()
                    .take(MAX_SHOWN_ID_CHARS)
                    .map(|c| if c.is_ascii_graphic() { c } else { '?' })
                    .collect();
                return Err(SelectionError::UnknownServer(shown));
            };
            if !selected.contains(&id) {
                selected.push(id);
            }
        }
        Ok(selected)
    }
}
