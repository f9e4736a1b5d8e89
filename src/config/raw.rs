//! Raw serde types, exactly as written in `mcpgate.toml`, `mcpServers` JSON and
//! `EXTERNAL_MCP_SERVERS_JSON`; unknown fields are errors.
