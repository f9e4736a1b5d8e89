//! Connections to upstream MCP servers and the manager that keeps them healthy.
