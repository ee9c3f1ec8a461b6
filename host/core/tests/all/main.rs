//! The loop driven in-process through the service: one `Host`, real plugins in the real sandbox,
//! a real SQLite store, and the scripted mock model.

mod conversations;
mod pipeline;

pub(crate) use conversations::{Env, approval_of, model, until};
