//! SSRF-safe outbound HTTP: address classification, validating resolver, redirect policy, caps.
