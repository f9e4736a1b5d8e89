//! Policy: who may see and call what, which calls need a confirmation, and the limits every
//! call is held to. Pure decisions plus calls into the stores.

mod context;

pub use context::CallContext;
