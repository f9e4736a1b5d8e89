//! The HTTP service behind `mcpgate serve`: authentication, the REST API, health and the error mapping.
pub mod auth;
