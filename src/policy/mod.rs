//! Policy: who may see and call what, which calls need a confirmation, and the limits every
//! call is held to. Pure decisions plus calls into the stores.

mod access;
mod arguments;
pub(crate) use arguments::ByteCounter;
mod classify;
mod clock;
mod context;
mod limits;

pub use access::{ADMIN_ROLE, Access, Admin, METRICS_ROLE};
pub use arguments::{
    ArgumentError, CompiledSchema, InvalidSchema, MAX_ARGUMENT_DEPTH, check_value, parse_arguments,
    type_name, validate as validate_arguments,
};
pub use classify::{Effect, classify, needs_confirmation};
pub use clock::{Clock, ManualClock};
pub use context::{CallContext, new_request_id};
pub use limits::{
    CallPermit, DEFAULT_MAX_TRACKED_USERS, LimitExceeded, LimitKind, Limiter, TrackedUsers,
};
