//! The embedding API: connect one MCP server, get its tool set, call its tools.
