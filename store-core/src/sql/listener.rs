//! The long-poll listener's liveness check (`longpoll/listener.rs`).

/// The liveness check: any answer proves the server alive, and the value says
/// whether this session still takes writes (`off`), as a primary's does.
pub const LIVENESS_SQL: &str = "SELECT current_setting('transaction_read_only')";
