//! The severity of a line the decisions ask the host to log: part of the
//! decisions' vocabulary ([`crate::machine::Action`], the outbox's actions),
//! performed by the drivers through [`crate::drive::host::Host::log`].

/// Log severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Routine.
    Info,
    /// Something an operator may need to look at.
    Warn,
    /// Something is broken (an invalid plugin configuration, a reply that
    /// could not be sent).
    Error,
}
