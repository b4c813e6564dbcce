//! The error body every failed request answers with, and its codes.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// Every error response: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable code (`validation_failed`, `not_found`, …).
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub message: String,
    /// The offending request field, when one is at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// Declares [`ErrorCode`]: every code with its wire string, written once.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident => $wire:literal,)+) => {
        /// The `code` of an error body: stable and machine-readable.
        ///
        /// On the wire it is a snake_case string. A code this build does not know (one a
        /// newer server answers with) reads as [`ErrorCode::Other`] and keeps its string,
        /// so a client still reads the error, shows it and can pass it on unchanged.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)+
            /// A code this build does not know, as it was sent.
            Other(String),
        }

        impl ErrorCode {
            /// Every code this build knows, in declaration order.
            pub const KNOWN: &'static [ErrorCode] = &[$(ErrorCode::$variant),+];

            /// The wire string.
            pub fn as_str(&self) -> &str {
                match self {
                    $(ErrorCode::$variant => $wire,)+
                    ErrorCode::Other(code) => code,
                }
            }
        }

        impl From<String> for ErrorCode {
            fn from(code: String) -> Self {
                match code.as_str() {
                    $($wire => ErrorCode::$variant,)+
                    _ => ErrorCode::Other(code),
                }
            }
        }
    };
}

error_codes! {
    // 400: the request is malformed or invalid.
    /// A field's value breaks a rule; `field` names it.
    ValidationFailed => "validation_failed",
    /// The request body could not be read.
    InvalidBody => "invalid_body",
    InvalidJson => "invalid_json",
    UnknownField => "unknown_field",
    /// A body field has the wrong type or shape.
    InvalidField => "invalid_field",
    InvalidQuery => "invalid_query",
    InvalidPath => "invalid_path",
    /// A webhook delivery lacks a header it needs, or carries a bad one.
    InvalidHeader => "invalid_header",
    /// A webhook delivery's payload is not what GitHub sends.
    InvalidPayload => "invalid_payload",
    /// A patch tries to change a stack's id.
    ImmutableField => "immutable_field",
    /// A plan file goes past a parser limit.
    InputLimit => "input_limit",
    /// The state body does not match its `Content-MD5`.
    ChecksumMismatch => "checksum_mismatch",
    /// The state body is not a state document.
    InvalidState => "invalid_state",
    /// The lock info carries no `ID`.
    InvalidLock => "invalid_lock",
    // 401, 403, 404, 405.
    Unauthenticated => "unauthenticated",
    Forbidden => "forbidden",
    NotFound => "not_found",
    /// No route serves the path.
    RouteNotFound => "route_not_found",
    MethodNotAllowed => "method_not_allowed",
    // 409: the request conflicts with what is stored.
    AlreadyExists => "already_exists",
    DependencyCycle => "dependency_cycle",
    HasDependents => "has_dependents",
    HasOpenRuns => "has_open_runs",
    /// Deleting a stack that has state needs `delete_state=true`.
    HasState => "has_state",
    /// The org would be left without an admin.
    LastAdmin => "last_admin",
    /// The lease is no longer the caller's: a newer one replaced it.
    Fenced => "fenced",
    InvalidTransition => "invalid_transition",
    /// A state write under a lock the writer does not hold.
    LockNotHeld => "lock_not_held",
    /// A state write whose serial goes backwards.
    SerialBackwards => "serial_backwards",
    /// A state write with another lineage.
    LineageChanged => "lineage_changed",
    RunInProgress => "run_in_progress",
    EnvironmentInUse => "environment_in_use",
    /// Deleting a host other hosts are reached through, or making it `local`.
    HostInUse => "host_in_use",
    /// A plan's schedule set by its file, which the API does not change.
    ScheduleFromFile => "schedule_from_file",
    NotAwaitingApproval => "not_awaiting_approval",
    /// The stored plan no longer parses.
    InvalidPlan => "invalid_plan",
    /// An environment's `hosts_from` names a stack or output that gives no hosts (missing,
    /// sensitive, not a list or map, or an entry that does not render).
    HostSourceUnresolved => "host_source_unresolved",
    /// Changing or deleting a host an environment takes from a stack's output.
    HostFromStack => "host_from_stack",
    /// The run waits for an approval in the approvals inbox.
    ApprovalRequired => "approval_required",
    /// A force-unlock of a state that is not locked.
    NotLocked => "not_locked",
    /// A force-unlock naming another lock than the one held.
    LockMismatch => "lock_mismatch",
    // 410.
    /// What was asked for was deleted by retention (a summarised run's log).
    Gone => "gone",
    // 413, 415, 423.
    PayloadTooLarge => "payload_too_large",
    UnsupportedMediaType => "unsupported_media_type",
    /// The state is locked by someone else.
    StateLocked => "state_locked",
    // 429.
    /// Too many requests of this kind right now; retry after `Retry-After`.
    RateLimited => "rate_limited",
    // 500, 503.
    Internal => "internal",
    Unavailable => "unavailable",
    /// The database cannot answer or write right now; retry after `Retry-After`.
    StoreUnavailable => "store_unavailable",
}

impl From<&str> for ErrorCode {
    fn from(code: &str) -> Self {
        ErrorCode::from(code.to_string())
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(ErrorCode::from)
    }
}

/// A string schema listing the codes this build answers with.
impl PartialSchema for ErrorCode {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(ErrorCode::KNOWN.iter().map(ErrorCode::as_str)))
            .into()
    }
}

impl ToSchema for ErrorCode {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ErrorCode")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_as_its_snake_case_string() {
        for code in ErrorCode::KNOWN {
            let wire = code.as_str();
            assert!(
                wire.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{wire}"
            );
            assert_eq!(serde_json::to_value(code).ok(), Some(wire.into()));
            let back: Option<ErrorCode> = serde_json::from_value(wire.into()).ok();
            assert_eq!(back.as_ref(), Some(code));
        }
        let mut wires: Vec<&str> = ErrorCode::KNOWN.iter().map(ErrorCode::as_str).collect();
        wires.sort_unstable();
        wires.dedup();
        assert_eq!(
            wires.len(),
            ErrorCode::KNOWN.len(),
            "a wire string used twice"
        );
    }

    #[test]
    fn an_unknown_code_is_kept_as_sent() {
        let body = r#"{"error":{"code":"quota_exceeded","message":"m"}}"#;
        let parsed: Option<ErrorBody> = serde_json::from_str(body).ok();
        let code = parsed.map(|b| b.error.code);
        assert_eq!(code, Some(ErrorCode::Other("quota_exceeded".into())));
        let again = code.and_then(|c| serde_json::to_string(&c).ok());
        assert_eq!(again.as_deref(), Some(r#""quota_exceeded""#));
        assert_eq!(ErrorCode::from("fenced"), ErrorCode::Fenced);
    }
}
