//! The gateway: the one gate every tool call passes, and the catalog it keeps fresh.
