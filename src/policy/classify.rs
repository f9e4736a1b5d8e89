//! Write classification: which tools read and which write, and which calls need the user's
//! confirmation. A tool is a write unless configuration says it reads.

use rmcp::model::Tool;

use crate::config::{Confirm, ServerConfig};

/// What a tool does to the world, as far as policy is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Read,
    Write,
}

/// Classifies `tool` of `server`. Explicit lists win; upstream annotations count only for
/// servers marked `trust_annotations` (they are hints from an untrusted party); otherwise the
/// tool is a write.
pub fn classify(server: &ServerConfig, tool: &Tool) -> Effect {
    let name = tool.name.as_ref();
    if server.write_tools.iter().any(|t| t == name) {
        return Effect::Write;
    }
    if server.read_only_tools.iter().any(|t| t == name) {
        return Effect::Read;
    }
    if server.trust_annotations {
        let hints = tool.annotations.as_ref();
        let read_only = hints.and_then(|a| a.read_only_hint) == Some(true);
        let destructive = hints.and_then(|a| a.destructive_hint) == Some(true);
        if read_only && !destructive {
            return Effect::Read;
        }
    }
    Effect::Write
}

/// Whether a call of a tool with `effect` on `server` needs a confirmation token.
pub fn needs_confirmation(server: &ServerConfig, effect: Effect) -> bool {
    match server.confirm {
        Confirm::All => true,
        Confirm::Writes => effect == Effect::Write,
        Confirm::None => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::ToolAnnotations;

    use super::*;
    use crate::config::{ServerId, StdioConfig, TransportConfig};

    fn server() -> ServerConfig {
        ServerConfig::new(
            ServerId::new("s").expect("valid id"),
            TransportConfig::Stdio(StdioConfig {
                command: "x".into(),
                args: vec![],
                env: vec![],
                cwd: None,
                sandbox: crate::config::Sandbox::default(),
            }),
        )
    }

    fn tool(name: &str, read_only: Option<bool>, destructive: Option<bool>) -> Tool {
        let mut t = Tool::new(name.to_owned(), "d", Arc::new(serde_json::Map::new()));
        let mut a = ToolAnnotations::new();
        a.read_only_hint = read_only;
        a.destructive_hint = destructive;
        t.annotations = Some(a);
        t
    }

    #[test]
    fn default_is_write_and_annotations_are_untrusted() {
        let s = server();
        assert_eq!(classify(&s, &tool("t", Some(true), None)), Effect::Write);
    }

    #[test]
    fn explicit_lists_win() {
        let mut s = server();
        s.read_only_tools = vec!["r".into()];
        s.write_tools = vec!["w".into()];
        s.trust_annotations = true;
        assert_eq!(
            classify(&s, &tool("r", Some(false), Some(true))),
            Effect::Read
        );
        assert_eq!(classify(&s, &tool("w", Some(true), None)), Effect::Write);
    }

    #[test]
    fn trusted_annotations_count_but_destructive_wins() {
        let mut s = server();
        s.trust_annotations = true;
        assert_eq!(classify(&s, &tool("a", Some(true), None)), Effect::Read);
        assert_eq!(
            classify(&s, &tool("b", Some(true), Some(true))),
            Effect::Write
        );
        assert_eq!(classify(&s, &tool("c", None, None)), Effect::Write);
    }

    #[test]
    fn confirm_modes() {
        let mut s = server();
        assert!(needs_confirmation(&s, Effect::Write));
        assert!(!needs_confirmation(&s, Effect::Read));
        s.confirm = Confirm::All;
        assert!(needs_confirmation(&s, Effect::Read));
        s.confirm = Confirm::None;
        assert!(!needs_confirmation(&s, Effect::Write));
    }
}
