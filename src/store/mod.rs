//! Durable and shared state behind traits: confirmations, audit records; memory and SQLite.
